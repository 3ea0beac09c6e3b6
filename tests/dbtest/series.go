package dbtest

import (
	"strconv"
	"strings"
)

// Series returns a SELECT of the whole numbers 0 to n-1, as the column
// i, that every server runs, for an INSERT ... SELECT of many rows at
// once: tables of the ten digits, cross joined (MySQL's recursive CTEs
// stop at 1,000 levels by default).
func Series(n int) string {
	digits := "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
		"UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	from, sum := []string{digits + " AS d0"}, []string{"d0.d"}
	for i, p := 1, 10; p < n; i, p = i+1, p*10 {
		d := "d" + strconv.Itoa(i)
		from = append(from, digits+" AS "+d)
		sum = append(sum, d+".d * "+strconv.Itoa(p))
	}
	expr := strings.Join(sum, " + ")
	return "SELECT " + expr + " AS i FROM " + strings.Join(from, " CROSS JOIN ") + " WHERE " + expr + " < " + strconv.Itoa(n)
}
