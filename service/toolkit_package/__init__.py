"""toolkit-package: a pure, bounded metadata model of toolkit packages."""
