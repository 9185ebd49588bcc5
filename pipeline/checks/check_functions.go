package checks

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
	"github.com/shardctl/shardctl/verify"
)

func init() {
	register(Check{
		Name:  "server flavors and functions",
		Until: plans.StepCreate,
		Run: func(ctx context.Context, c *CheckEnv) error {
			problems, err := flavorProblems(ctx, c.Src, c.Dst, c.Plan)
			if err != nil {
				return err
			}
			return refuse(problems)
		},
	})
}

// flavorProblems refuses a server version shardctl does not know
// (dbutil.Flavor.Known), a pair of servers it cannot move between
// (dbutil.Pairable) and a server that lacks a
// function the plan needs. The checksums use only what every server has
// (verify.RowsChecksumSQL); hash arcs need MD5() inside the server, because
// the fence triggers, the copy's filter and cleanup compute a row's ring
// position there, and MySQL 9.6+ as installed has no MD5() (it moved to
// component_classic_hashing). So a split or merge of a HASH map on such a
// server is refused with the statement that adds it; RANGE and LIST maps and
// every move need nothing beyond a stock server.
func flavorProblems(ctx context.Context, src, dst *sql.DB, p *plans.Plan) ([]string, error) {
	fs, err := dbutil.FlavorOf(ctx, src)
	if err != nil {
		return nil, failure.ProbeError("the server version", "source", p.Source.Addr(), err)
	}
	fd, err := dbutil.FlavorOf(ctx, dst)
	if err != nil {
		return nil, failure.ProbeError("the server version", "target", p.Target.Addr(), err)
	}
	var problems []string
	if err := fs.Known(); err != nil {
		problems = append(problems, fmt.Sprintf("the source %s runs %v", p.Source.Addr(), err))
	}
	if err := fd.Known(); err != nil {
		problems = append(problems, fmt.Sprintf("the target %s runs %v", p.Target.Addr(), err))
	}
	if err := dbutil.Pairable(fs, fd); err != nil {
		problems = append(problems, err.Error())
	}
	needs := []struct{ what, sql string }{{"the checksums", "SELECT " + verify.RowsChecksumSQL(fs, fd, "''")}}
	for _, t := range p.Copy {
		if len(t.Filter.Arcs) > 0 {
			needs = append(needs, struct{ what, sql string }{"the hash ranges (the fence triggers, the copy's filter and cleanup compute MD5 of the key inside the server)", "SELECT MD5('')"})
			break
		}
	}
	for _, s := range []struct {
		role string
		addr string
		db   *sql.DB
		f    dbutil.Flavor
	}{{"source", p.Source.Addr(), src, fs}, {"target", p.Target.Addr(), dst, fd}} {
		for _, n := range needs {
			var h sql.NullString
			if err := s.db.QueryRowContext(ctx, n.sql).Scan(&h); err != nil {
				if dbutil.IsMissingFunction(err) {
					hint := "; the server lacks a built-in function: use a server that has it"
					if s.f.MySQL {
						hint = failure.ClassicHashingHint
					}
					problems = append(problems, fmt.Sprintf("the %s %s lacks a function that %s use (%v)%s", s.role, s.addr, n.what, err, hint))
					break
				}
				return nil, failure.ProbeError("the functions "+n.what+" use", s.role, s.addr, err)
			}
		}
	}
	return problems, nil
}
