"""Access: principals, their bearer tokens and roles (create, authenticate, revoke).

Their rows are written and read through `store.principals`, which also tells the token
cache of every change; nothing here speaks SQL.

May import: `store` and everything below it.
"""
