package soak

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Point is one value of a series, At in seconds since the soak began.
type Point struct {
	At    float64 `json:"t_s"`
	Value float64 `json:"v"`
}

// Fit is the judgement of one series of one metric.
type Fit struct {
	Metric string  `json:"metric"`
	Series string  `json:"series"`
	Points int     `json:"points"`          // points judged (after the warm-up)
	Window float64 `json:"window_s"`        // seconds judged
	Median float64 `json:"median"`          // the judged points' median
	Slope  float64 `json:"slope_per_s"`     // Theil–Sen slope, units a second
	Growth float64 `json:"growth"`          // Slope × Window
	Shift  float64 `json:"shift"`           // last quarter's median − first quarter's median
	Bound  float64 `json:"bound"`           // the growth that makes a LEAK for this series
	Leak   bool    `json:"leak"`            // Growth and Shift both past the bound (Shift: half of it)
	Short  string  `json:"short,omitempty"` // why the series was not judged ("" when it was)
	Unit   string  `json:"unit,omitempty"`  // the metric's unit
}

// MinPoints is the fewest points after the warm-up that a series needs to be judged.
const MinPoints = 8

// Judge fits the points of one series that come after warmup and tells whether the metric
// leaks. Points must be in time order.
func Judge(m Metric, series string, pts []Point, warmup time.Duration) Fit {
	f := Fit{Metric: m.Name, Series: series, Unit: m.Unit}
	start := 0
	if len(pts) > 0 {
		from := pts[0].At + warmup.Seconds()
		for start < len(pts) && pts[start].At < from {
			start++
		}
	}
	judged := pts[start:]
	f.Points = len(judged)
	if len(judged) < MinPoints {
		f.Short = fmt.Sprintf("%d point(s) after the warm-up, %d needed", len(judged), MinPoints)
		return f
	}
	f.Window = judged[len(judged)-1].At - judged[0].At
	vals := make([]float64, len(judged))
	for i, p := range judged {
		vals[i] = p.Value
	}
	f.Median = median(vals)
	f.Slope = theilSen(judged)
	f.Growth = f.Slope * f.Window
	q := len(judged) / 4
	f.Shift = median(vals[len(vals)-q:]) - median(vals[:q])
	f.Bound = math.Max(m.Bound, m.Rel*f.Median)
	f.Leak = f.Growth > f.Bound && f.Shift > f.Bound/2
	return f
}

// theilSen is the median of the slopes between every pair of points with distinct times.
func theilSen(pts []Point) float64 {
	slopes := make([]float64, 0, len(pts)*(len(pts)-1)/2)
	for i := range pts {
		for j := i + 1; j < len(pts); j++ {
			if dt := pts[j].At - pts[i].At; dt > 0 {
				slopes = append(slopes, (pts[j].Value-pts[i].Value)/dt)
			}
		}
	}
	if len(slopes) == 0 {
		return 0
	}
	return median(slopes)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
