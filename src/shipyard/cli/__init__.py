"""The `shipyard` command: one module per subsystem's sub-commands."""
