package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

// PitfallRow is one line of the scenario's table.
type PitfallRow struct {
	Case     string         `json:"case"`     // the failure being shown
	Strategy string         `json:"strategy"` // X-Strategy
	Role     string         `json:"role"`     // rolePitfall or roleFix
	Expected string         `json:"expected"` // the verdict the row must show
	Verdict  string         `json:"verdict"`  // OVERSOLD, BLOCKED or SAFE (internal/verdict)
	Sold     int            `json:"sold_units"`
	Initial  int            `json:"initial_stock"`
	Answers  map[string]int `json:"answers"` // by status code or error code
	Detail   string         `json:"detail"`  // what the script observed
	Lesson   string         `json:"lesson"`
	OK       bool           `json:"ok"` // the pitfall showed its failure, or the fix held

	Blocked bool `json:"-"` // the script saw a lock nobody could take (finish: verdict.Blocked)
}

// WritePitfalls prints the table and returns the exit status: 1 when a pitfall did not show its
// failure or a fix broke an invariant.
func WritePitfalls(w io.Writer, rows []PitfallRow) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tSTRATEGY\tROLE\tEXPECTED\tVERDICT\tSOLD/STOCK\tANSWERS\tLESSON")
	code := 0
	for _, row := range rows {
		mark := ""
		if !row.OK {
			mark, code = "  <- UNEXPECTED", 1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s%s\t%d/%d\t%s\t%s\n", row.Case, row.Strategy, row.Role, row.Expected,
			row.Verdict, mark, row.Sold, row.Initial, answers(row.Answers), row.Lesson)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "%-12s %-18s %s\n", row.Case, row.Strategy, row.Detail)
	}
	return code
}

// answers renders answers by status or code as "201×n 409×n", in key order.
func answers(m map[string]int) string { return counted(m, "×") }

// WritePitfallsJSON writes the -json report of -scenario pitfalls to file: the database, the
// instances' lease and lock wait, the rows and the exit status.
func WritePitfallsJSON(file, db string, lease, lockWait time.Duration, rows []PitfallRow, code int) error {
	b, err := json.MarshalIndent(map[string]any{"scenario": "pitfalls", "db": db, "lease_ms": ms(lease),
		"lock_wait_ms": ms(lockWait), "rows": rows, "exit_code": code}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
