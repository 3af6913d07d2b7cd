"""The command modules; each has ``register(add)`` that adds its subcommands to the parser."""
