"""`python -m xai_core`: `main` builds the parser, `common` holds what every sub-command
shares (errors, output, options), and each further module adds one group of commands."""
