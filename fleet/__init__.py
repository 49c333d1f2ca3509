"""fleet: what did we actually rent, and how fast is it really?"""

__version__ = "0.1.0"
