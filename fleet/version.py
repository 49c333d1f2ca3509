"""fleet's version: what the store, the report and the sweep's workers stamp, read without
loading the library (fleet/__init__.py's `fleet.Store` imports the store and pandas)."""

__version__ = "0.1.0"
