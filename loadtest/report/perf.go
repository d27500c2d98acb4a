package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

// PerfReport is the outcome of -perf, as written by -json.
type PerfReport struct {
	StartedAt time.Time      `json:"started_at"`
	Machine   Machine        `json:"machine"`
	Redis     string         `json:"redis"`
	DB        string         `json:"db"`
	Clients   int            `json:"clients"`
	PhaseS    float64        `json:"phase_s"` // length of one measured phase
	Rounds    int            `json:"rounds"`
	Rows      []PerfRow      `json:"rows"`
	Ratios    []PerfRatio    `json:"ratios"`
	Phases    []PerfPhaseLog `json:"phases"` // every measured phase, in run order
}

// PerfRow is one target in one scenario, over every round.
type PerfRow struct {
	Items     int            `json:"items"`
	Target    string         `json:"target"`
	Requests  int64          `json:"requests"`
	ReqPerSec float64        `json:"req_per_s"`
	P50MS     float64        `json:"p50_ms"`
	P99MS     float64        `json:"p99_ms"`
	Not2xx    map[string]int `json:"not_2xx,omitempty"`               // answers that were not a sale, by status or error
	CPUPerReq float64        `json:"server_cpu_us_per_req,omitempty"` // the storefront's CPU time per answer (Linux /proc)
	MeanBatch float64        `json:"mean_batch,omitempty"`            // lock+guard: orders per coalesced hold
}

// PerfRatio is one ratio of req/s within a scenario.
type PerfRatio struct {
	Items  int     `json:"items"`
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Target float64 `json:"target,omitempty"` // the goal it is held to, when it has one
}

// PerfPhaseLog is one measured phase.
type PerfPhaseLog struct {
	Round     int     `json:"round"`
	Items     int     `json:"items"`
	Target    string  `json:"target"`
	Requests  int64   `json:"requests"`
	ReqPerSec float64 `json:"req_per_s"`
}

// WriteTable prints the rows and the ratios.
func (r *PerfReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "same-run performance: %d closed-loop clients, no work, %d round(s) of %gs per target, %s, %s (%d CPUs: ratios within this run)\n",
		r.Clients, r.Rounds, r.PhaseS, r.DB, r.Redis, r.Machine.CPUs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "items\ttarget\treq/s\tp50\tp99\tserver CPU/req\tmean batch\tnot 201\t\n")
	for _, row := range r.Rows {
		batch := "-"
		if row.MeanBatch > 0 {
			batch = fmt.Sprintf("%.1f", row.MeanBatch)
		}
		cpu := "-"
		if row.CPUPerReq > 0 {
			cpu = fmt.Sprintf("%.0fµs", row.CPUPerReq)
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", row.Items, row.Target, row.ReqPerSec,
			fmtMS(row.P50MS), fmtMS(row.P99MS), cpu, batch, codes(row.Not2xx))
	}
	_ = tw.Flush()
	for _, x := range r.Ratios {
		goal := ""
		if x.Target > 0 {
			verdict := "met"
			if x.Value < x.Target {
				verdict = "MISSED"
			}
			goal = fmt.Sprintf("   (target >= %.1fx: %s)", x.Target, verdict)
		}
		fmt.Fprintf(w, "%2d item(s): %-32s %5.2fx%s\n", x.Items, x.Name, x.Value, goal)
	}
}

// WriteJSON writes r to path.
func (r *PerfReport) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
