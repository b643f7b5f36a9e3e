package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// groupCommand makes cmd, a command that only groups subcommands, refuse
// an unknown subcommand the way cobra refuses one of the root: without a
// Run cobra prints the help and exits 0 instead, so a script with a typo
// (`fleet install contoller`) would carry on as if it had worked. Without
// arguments the help is printed, as before.
func groupCommand(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		return unknownSubcommand(cmd, args[0])
	}
	// A flag of the misspelt subcommand (`fleet install agent-tokn
	// --values`) is unknown to the group: the subcommand is the error.
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if args := cmd.Flags().Args(); len(args) > 0 {
			return unknownSubcommand(cmd, args[0])
		}
		return err
	})
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}

// unknownSubcommand is cobra's error for an unknown command of the root,
// suggestions included.
func unknownSubcommand(cmd *cobra.Command, name string) error {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set by its own lookup only
	}
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return errors.New(msg)
}
