"""What the tests share: a running gateway, requests, waits, fake peers and service helpers."""
