package snapshot

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/shardctl/shardctl/dbutil"
	"github.com/shardctl/shardctl/xflavor"
)

// Rules are the translations a definition read on src needs on dst: none
// between servers of one flavor; between MariaDB and MySQL, xflavor's rules
// checked against the collations dst has; from MariaDB to an older MariaDB
// (xflavor.Older), no translation but a check against what dst lacks.
func Rules(ctx context.Context, src, dst *sql.DB) (xflavor.Rules, error) {
	fs, err := dbutil.FlavorOf(ctx, src)
	if err != nil {
		return xflavor.Rules{}, fmt.Errorf("read the source's flavor: %w", err)
	}
	fd, err := dbutil.FlavorOf(ctx, dst)
	if err != nil {
		return xflavor.Rules{}, fmt.Errorf("read the target's flavor: %w", err)
	}
	x := xflavor.Rules{Dir: xflavor.Between(fs.MySQL, fd.MySQL), Target: fd.String(), Vector: fd.HasVector()}
	if x.Dir == xflavor.Same && !fs.MySQL && fd.Older(fs) {
		x.Dir = xflavor.Older
	}
	if x.Dir == xflavor.Same {
		return x, nil
	}
	// MariaDB 10.10+ lists its uca1400 collations by full name only in the
	// applicability table.
	q := "SELECT FULL_COLLATION_NAME FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY"
	if fd.MySQL {
		q = "SELECT COLLATION_NAME FROM information_schema.COLLATIONS"
	}
	x.Collations = map[string]bool{}
	var c string
	if err := dbutil.ScanEach(ctx, dst, q, nil, []any{&c}, func() error { x.Collations[c] = true; return nil }); err != nil {
		return x, fmt.Errorf("read the target's collations: %w", err)
	}
	return x, nil
}
