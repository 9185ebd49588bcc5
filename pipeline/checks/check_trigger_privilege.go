package checks

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/pipeline/failure"
	"github.com/shardctl/shardctl/plans"
)

// The fence is a set of triggers on the source. On a server that writes a
// binlog, MySQL and MariaDB let an account create triggers only with SUPER or
// with log_bin_trust_function_creators=ON (else error 1419 at the fence, after
// the whole copy): refused before anything is changed instead.
func init() {
	register(Check{
		Name:  "fence trigger privilege",
		Until: plans.StepCutover,
		Run: func(ctx context.Context, c *CheckEnv) error {
			ok, err := mayCreateTriggers(ctx, c.Src)
			if err != nil {
				return fmt.Errorf("read the source's binlog settings and privileges: %w", err)
			}
			if !ok {
				return fmt.Errorf("%w: the source %s writes a binlog, log_bin_trust_function_creators is OFF and this account has no SUPER privilege, so it cannot create the fence's triggers (error 1419 at the fence step): run 'SET GLOBAL log_bin_trust_function_creators = ON' on the source (and in its config file), or grant SUPER ON *.* to the account, then run again", failure.ErrRefused, c.Plan.Source.Addr())
			}
			return nil
		},
	})
}

// mayCreateTriggers reports whether the account can create triggers with
// the server's binlog settings.
func mayCreateTriggers(ctx context.Context, db *sql.DB) (bool, error) {
	var logBin, trust int
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.log_bin, @@GLOBAL.log_bin_trust_function_creators").Scan(&logBin, &trust); err != nil {
		return false, err
	}
	if logBin == 0 || trust == 1 {
		return true, nil
	}
	// USER_PRIVILEGES lists a global ALL as each privilege, SUPER included,
	// on both flavors; GRANTEE is quoted as 'user'@'host'.
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES
		WHERE PRIVILEGE_TYPE = 'SUPER' AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')`).Scan(&n)
	return n > 0, err
}
