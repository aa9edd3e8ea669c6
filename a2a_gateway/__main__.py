from a2a_gateway.cli import main

main()
