"""Ledger: a transactional action ledger with a GraphQL API."""

__version__ = "0.1.0"
