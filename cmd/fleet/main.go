// Command fleet is the Fleet CLI.
package main

import (
	"fmt"
	"os"

	"github.com/fleetgo/fleet/internal/cli"
)

func main() {
	if err := cli.NewRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
