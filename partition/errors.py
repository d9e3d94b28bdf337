"""One exception type for every problem a user can fix, so CLIs can print it as one line."""


class PartitionError(ValueError):
    """Bad input or bad on-disk data; the message names the problem."""
