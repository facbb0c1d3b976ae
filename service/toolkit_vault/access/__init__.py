"""Access: principals, their bearer tokens and roles (create, authenticate, revoke).

May import: `store` and everything below it.
"""
