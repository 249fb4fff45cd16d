// Command pulumi-resource-kubernetes serves the Pulumi Kubernetes provider from the
// module's published packages (see go.mod for why this main exists).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

// readBeside reads a file that e2e/build.py copied next to this executable.
func readBeside(name string) []byte {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-resource-kubernetes:", err)
		os.Exit(1)
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(exe), name))
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-resource-kubernetes:", err)
		os.Exit(1)
	}
	return data
}

func main() {
	provider.Serve("kubernetes", version.Version, readBeside("schema.json"), readBeside("terraform-mapping.json"))
}
