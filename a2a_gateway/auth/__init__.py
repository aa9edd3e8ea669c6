"""Who is calling: credentials on a request → the principal its tasks are recorded under."""
