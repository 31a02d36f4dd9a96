"""The version of tunecache itself."""

__version__ = "0.1.0"
