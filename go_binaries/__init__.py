"""The real binaries the e2e, the rehearsal, `make policy` and the upstream checks run, built once from the Go
module proxy into a cache outside the repository (build.py; its wrapper modules under wrappers/)."""
