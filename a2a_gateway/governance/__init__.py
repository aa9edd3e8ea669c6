"""Governance of a shared gateway: usage, quotas and the audit of operators' changes."""
