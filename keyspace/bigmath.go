package keyspace

import (
	"fmt"
	"math/big"
)

// Ring arithmetic for Midpoint: MD5 hashes as 128-bit numbers.

var ringSize = new(big.Int).Lsh(big.NewInt(1), 128)

func hexToBig(h string) *big.Int {
	n, ok := new(big.Int).SetString(h, 16)
	if !ok {
		return new(big.Int)
	}
	return n
}

func addRing(n *big.Int) *big.Int { return new(big.Int).Add(n, ringSize) }

func halfSum(a, b *big.Int) *big.Int {
	s := new(big.Int).Add(a, b)
	return s.Rsh(s, 1)
}

func bigToHex(n *big.Int) string {
	m := new(big.Int).Mod(n, ringSize)
	return fmt.Sprintf("%032x", m)
}
