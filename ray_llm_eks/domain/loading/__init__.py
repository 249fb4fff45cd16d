"""The stack's keys compiled into Settings in one forward pass: the typed raw reader, each section's parser, the
serving section."""
