package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/pipeline"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/shardmap"
)

func (a *app) smImport() *cobra.Command {
	var fn string
	var dryRun, yes bool
	c := &cobra.Command{
		Use:   "import [--function NAME] [--dry-run] FILE|-",
		Short: "Register LIST points in bulk from CSV lines key,shard or the JSON of 'shardmap show -o json' (one transaction, one version bump)",
		Long: `Register the LIST points of a file ('-' reads standard input): CSV lines
"key,shard" (a "key,shard" header and '#' comments are allowed), or the JSON
'shardmap show -o json' and 'shardmap export -o json' write. The whole file is
checked as add-point checks one key (a key of the function's type, a shard of
the map, no key twice, no shard a running plan owns) and then written in one
transaction with one version bump; a refusal names the line and writes nothing.

A key already mapped to the same shard is unchanged. A key the file maps to
another shard is re-pointed only when its shard holds none of its rows (looked
at twice, the second time with the key offline); a tenant with rows moves with
'shardctl move --shard S --keys K --into T'.`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ps, err := readPoints(cmd, args[0])
			if err != nil {
				return err
			}
			return a.withStore(cmd, func(s *shardmap.Store) error {
				ctx := cmd.Context()
				m, err := s.Load(ctx)
				if err != nil {
					return err
				}
				f, err := m.ImportFunction(fn, ps)
				if err != nil {
					return err
				}
				im, err := m.PlanImport(f, ps)
				if err != nil {
					return err
				}
				e := pipeline.MapEdit{Command: "import", Lines: map[int]string{}}
				for id, p := range im.Shards() {
					e.Shards = append(e.Shards, id)
					e.Lines[id] = p.String()
				}
				if dryRun {
					if err := a.opError(pipeline.CheckMapEdit(ctx, s, a.planDir(), e), nil); err != nil {
						return err
					}
					if err := s.ImportRows(ctx, m, im); err != nil {
						return err
					}
				} else if err := a.editMap(ctx, s, e, func() (err error) {
					im, err = s.Import(ctx, f, ps)
					return err
				}); err != nil {
					return err
				}
				v, err := s.Version(ctx)
				if err != nil {
					return err
				}
				out := map[string]any{"function": f.Name, "added": len(im.Added), "repointed": len(im.Repointed), "unchanged": im.Unchanged, "dry_run": dryRun, "version": v}
				return a.emit(out, func(w io.Writer) {
					switch {
					case dryRun:
						fmt.Fprintf(w, "import into function %s would make: %s; dry run: nothing was changed\n", f.Name, im.Counts())
					case im.Changes():
						fmt.Fprintf(w, "imported into function %s: %s (shard map version %d)\n", f.Name, im.Counts(), v)
					default:
						fmt.Fprintf(w, "function %s has every point already: %s (shard map version %d)\n", f.Name, im.Counts(), v)
					}
				})
			})
		},
	}
	c.Flags().StringVar(&fn, "function", "", "the LIST function (default: the one the JSON names, or the map's only LIST function)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print how many points would be added, re-pointed and left unchanged, and change nothing")
	asks(c, &yes) // the file is checked whole and refused whole: nothing to ask
	return c
}

// readPoints parses the points file at path ("-": standard input).
func readPoints(cmd *cobra.Command, path string) ([]shardmap.PointLine, error) {
	if path == "-" {
		return shardmap.ParsePoints(cmd.InOrStdin())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, badInput("%v", err)
	}
	defer f.Close()
	return shardmap.ParsePoints(f)
}

func (a *app) smExport() *cobra.Command {
	var fn string
	c := &cobra.Command{
		Use:   "export [--function NAME] [FILE|-]",
		Short: "Write a LIST function's points as CSV key,shard (-o json: the JSON of 'shardmap show'), the file 'shardmap import' reads",
		Args:  argsUsage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd, func(s *shardmap.Store) error {
				m, err := s.Load(cmd.Context())
				if err != nil {
					return err
				}
				f, err := m.ImportFunction(fn, nil)
				if err != nil {
					return err
				}
				ps := m.ExportPoints(f)
				write := func(w io.Writer) error {
					if a.jsonOut() {
						enc := json.NewEncoder(w)
						enc.SetIndent("", "  ")
						return enc.Encode(m.OfFunction(f))
					}
					return shardmap.WritePointsCSV(w, ps)
				}
				if len(args) == 0 || args[0] == "-" {
					a.emitted = true // the points are the output
					return write(a.out)
				}
				var buf bytes.Buffer
				if err := write(&buf); err != nil {
					return err
				}
				if err := plans.WriteAtomic(args[0], buf.Bytes()); err != nil {
					return badInput("export to %s: %v", args[0], err)
				}
				return a.emit(map[string]any{"function": f.Name, "points": len(ps), "file": args[0], "version": m.Version}, func(w io.Writer) {
					fmt.Fprintf(w, "%d points of function %s written to %s (shard map version %d)\n", len(ps), f.Name, args[0], m.Version)
				})
			})
		},
	}
	c.Flags().StringVar(&fn, "function", "", "the LIST function (default: the map's only LIST function)")
	return c
}
