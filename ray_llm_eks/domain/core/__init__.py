"""What every part of the domain shares: the errors and their one-line messages, the stack-key table, the files
shipped with the code, project-wide constants."""
