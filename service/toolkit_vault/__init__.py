"""toolkit-vault: the host side of the A2E toolkits capability, on an encrypted store."""

__all__ = ["__version__"]

__version__ = "0.1.0"
