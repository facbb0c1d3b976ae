"""Toolkits: where definitions come from and how they are initialized.

The registry (entry points, the built-in `filesystem` toolkit, imported packages), imports
of toolkit packages into stored definitions (`imports`, `import_report`,
`package_sources`).

May import: `audit`, `access`, `keys`, `store` and everything below them.
"""
