package pipeline

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/plans"
)

// flavorProblems refuses a MariaDB/MySQL pair and a server that lacks what
// the checksums need (MySQL 9.7 ships MD5() in a component).
func flavorProblems(ctx context.Context, src, dst *sql.DB, p *plans.Plan) ([]string, error) {
	fs, err := dbutil.FlavorOf(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", p.Source.Addr(), err)
	}
	fd, err := dbutil.FlavorOf(ctx, dst)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", p.Target.Addr(), err)
	}
	var problems []string
	if err := dbutil.SameFamily(fs, fd); err != nil {
		problems = append(problems, err.Error())
	}
	for _, s := range []struct {
		role string
		addr string
		db   *sql.DB
	}{{"source", p.Source.Addr(), src}, {"target", p.Target.Addr(), dst}} {
		var h string
		if err := s.db.QueryRowContext(ctx, "SELECT MD5('')").Scan(&h); err != nil {
			if dbutil.ErrNumber(err) == 1305 { // FUNCTION does not exist
				problems = append(problems, fmt.Sprintf("the %s %s has no MD5() function, which the checksums use: on MySQL 9.7 run INSTALL COMPONENT 'file://component_classic_hashing'", s.role, s.addr))
				continue
			}
			return nil, fmt.Errorf("%s %s: %w", s.role, s.addr, err)
		}
	}
	return problems, nil
}
