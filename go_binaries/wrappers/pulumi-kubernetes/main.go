// Command pulumi-resource-kubernetes serves the Pulumi Kubernetes provider from the
// module's published packages (see go.mod for why this main exists).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pulumi-resource-kubernetes:", err)
	os.Exit(1)
}

// readBeside reads a file that go_binaries/build.py copied next to this executable.
func readBeside(name string) []byte {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		fail(err)
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(exe), name))
	if err != nil {
		fail(err)
	}
	return data
}

// withVersion stamps the provider version into the schema, as the provider's own
// cmd/pulumi-resource-kubernetes/generate.go does when it writes schema-embed.json.
func withVersion(schema []byte, v string) []byte {
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(schema, &spec); err != nil {
		fail(err)
	}
	spec["version"], _ = json.Marshal(v)
	out, err := json.Marshal(spec)
	if err != nil {
		fail(err)
	}
	return out
}

func main() {
	schema := withVersion(readBeside("schema.json"), version.Version)
	provider.Serve("kubernetes", version.Version, schema, readBeside("terraform-mapping.json"))
}
