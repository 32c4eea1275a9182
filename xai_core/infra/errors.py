"""Error types shared across the core, kept apart so any module can raise them without
importing the module that happens to catch them."""


class OptionError(ValueError):
    """A method option that is unknown or out of range (message in words)."""
