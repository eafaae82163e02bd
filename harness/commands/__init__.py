"""The subcommands of ``python -m harness``, a module per family; each ``add`` registers its
subparser and the function that runs it."""
