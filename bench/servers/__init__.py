"""Launchers for the servers that ``bench/core_send.py`` compares; each runs as its own process."""
