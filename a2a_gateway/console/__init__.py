"""The operator console: a page at ``/console`` over the admin API and the event feed."""
