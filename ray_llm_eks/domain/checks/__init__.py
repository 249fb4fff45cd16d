"""Checks of the whole stack before and at deploy time: preflight against AWS's answers, upstream bugs the stack would
hit."""
