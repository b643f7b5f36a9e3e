package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// Time zones are read from the binary, not the image: Location must
	// work on a controller image without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/reugn/go-quartz/quartz"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// Reasons of the Ready condition of a Schedule.
const (
	// ReasonValid: the spec is valid and the Schedule is applied.
	ReasonValid = "Valid"
	// ReasonInvalidSchedule: spec.schedule is not a cron expression, or
	// never fires again.
	ReasonInvalidSchedule = "InvalidSchedule"
	// ReasonInvalidLocation: spec.location is not a known time zone.
	ReasonInvalidLocation = "InvalidLocation"
	// ReasonInvalidDuration: spec.duration is not shorter than the time
	// between the next two starts, or not positive.
	ReasonInvalidDuration = "InvalidDuration"
	// ReasonInvalidTarget: a target's selector does not parse.
	ReasonInvalidTarget = "InvalidTarget"
	// ReasonInvalidClusterGroup: whether a cluster is targeted depends on
	// a ClusterGroup whose selector cannot be evaluated. The spec itself
	// is valid; the Schedule acts again once the group is fixed.
	ReasonInvalidClusterGroup = "InvalidClusterGroup"
)

// SpecError is a Schedule the controller cannot act on, its spec or (for
// ReasonInvalidClusterGroup) a ClusterGroup it depends on; Reason is the
// Ready condition's reason.
type SpecError struct {
	Reason string
	Err    error
}

func (e *SpecError) Error() string { return e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// maxMerged bounds how many overlapping windows At follows to find
// when the open one closes.
const maxMerged = 64

// Timing is a Schedule's parsed cron expression, time zone and duration.
type Timing struct {
	spec     string
	trigger  *quartz.CronTrigger
	duration time.Duration
}

// ParseTiming checks the timing fields of spec at now: location (empty
// is the process's local zone, as in Rancher Fleet), the cron expression
// (Quartz syntax with a seconds field) with at least two starts after
// now, and a positive duration. Whether windows overlap is CheckOverlap's
// question. Pure apart from reading the zone database. Messages carry no
// moment, so that the same error reads the same at every reconcile.
func ParseTiming(spec fleet.ScheduleSpec, now time.Time) (*Timing, error) {
	loc := time.Local
	if spec.Location != "" {
		l, err := time.LoadLocation(spec.Location)
		if err != nil {
			return nil, &SpecError{Reason: ReasonInvalidLocation, Err: fmt.Errorf("spec.location: unknown time zone %q", spec.Location)}
		}
		loc = l
	}
	if strings.TrimSpace(spec.Schedule) == "" {
		return nil, &SpecError{Reason: ReasonInvalidSchedule, Err: errors.New("spec.schedule is empty")}
	}
	trigger, err := quartz.NewCronTriggerWithLoc(spec.Schedule, loc)
	if err != nil {
		return nil, &SpecError{Reason: ReasonInvalidSchedule, Err: fmt.Errorf("spec.schedule %q: %w", spec.Schedule, err)}
	}
	t := &Timing{spec: spec.Schedule, trigger: trigger, duration: spec.Duration.Duration}
	if t.duration <= 0 {
		// Rancher Fleet takes 0 (also an omitted duration) and closes
		// each window as it opens: its clusters would never deploy.
		return nil, &SpecError{Reason: ReasonInvalidDuration, Err: fmt.Errorf("spec.duration %s: a window must stay open for a positive duration", t.duration)}
	}
	first, ok := t.next(now)
	if !ok {
		return nil, &SpecError{Reason: ReasonInvalidSchedule, Err: fmt.Errorf("spec.schedule %q never starts again", spec.Schedule)}
	}
	if _, ok := t.next(first); !ok {
		return nil, &SpecError{Reason: ReasonInvalidSchedule, Err: fmt.Errorf("spec.schedule %q starts only once more; a Schedule needs recurring starts", spec.Schedule)}
	}
	return t, nil
}

// CheckOverlap is Rancher Fleet's rule: the duration, in whole seconds,
// must be shorter than the time between the next two starts after now
// (equal is refused too: the window would close as the next opens). Like
// Rancher's, the answer can depend on the date (uneven gaps, daylight
// saving, month lengths); Evaluate therefore asks only for a spec
// generation not yet found valid, and At merges windows that overlap.
func (t *Timing) CheckOverlap(now time.Time) error {
	first, ok := t.next(now)
	if !ok {
		return nil
	}
	second, ok := t.next(first)
	if !ok {
		return nil
	}
	if gap := second.Sub(first); t.duration.Truncate(time.Second) >= gap {
		return &SpecError{Reason: ReasonInvalidDuration, Err: fmt.Errorf("spec.duration %s is too long: it is not shorter than the %s between the next two starts of %q",
			t.duration, gap, t.spec)}
	}
	return nil
}

// next is the first start strictly after t.
func (t *Timing) next(after time.Time) (time.Time, bool) {
	n, err := t.trigger.NextFireTime(after.UnixNano())
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// Window is where a moment falls in a Schedule's windows. A window is
// [start, start+duration): open at its start, closed at its end.
type Window struct {
	// Active: a window is open.
	Active bool
	// End is when the open window closes (zero when not Active).
	End time.Time
	// NextStart is the first start after the moment; zero if there is
	// none.
	NextStart time.Time
}

// At says whether now is inside a window: some start s with
// now-duration < s <= now. Overlapping windows (a gap shorter than the
// duration, which CheckOverlap does not look for once a generation was
// valid) merge: the last start decides when the window closes.
func (t *Timing) At(now time.Time) Window {
	var w Window
	if t.duration > 0 {
		s, ok := t.next(now.Add(-t.duration))
		for i := 0; ok && !s.After(now) && i < maxMerged; i++ {
			w.Active, w.End = true, s.Add(t.duration)
			s, ok = t.next(s)
		}
	}
	w.NextStart, _ = t.next(now)
	return w
}

// NextBoundary is the next moment the window opens or closes after the
// one w was computed for (zero if never).
func (w Window) NextBoundary() time.Time {
	if w.Active && (w.NextStart.IsZero() || w.End.Before(w.NextStart)) {
		return w.End
	}
	return w.NextStart
}
