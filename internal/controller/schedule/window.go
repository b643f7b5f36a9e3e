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
	// ReasonInvalidDuration: windows would overlap (spec.duration is not
	// shorter than the time between two starts) or the duration is
	// negative.
	ReasonInvalidDuration = "InvalidDuration"
	// ReasonInvalidTarget: a target's selector does not parse.
	ReasonInvalidTarget = "InvalidTarget"
)

// SpecError is a Schedule spec the controller cannot act on; Reason is
// the Ready condition's reason.
type SpecError struct {
	Reason string
	Err    error
}

func (e *SpecError) Error() string { return e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

// overlapChecks is how many consecutive starts, from now on, are checked
// for a window that would still be open at the next start. Rancher Fleet
// checks the first two only; irregular expressions (two starts close
// together once a day) need more.
const overlapChecks = 64

// Timing is a Schedule's parsed cron expression, time zone and duration.
type Timing struct {
	trigger  *quartz.CronTrigger
	duration time.Duration
}

// ParseTiming checks the timing fields of spec at now: location (empty
// is the process's local zone, as in Rancher Fleet), the cron expression
// (Quartz syntax with a seconds field), and that each window closes
// before the next one opens. Pure apart from reading the zone database.
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
	t := &Timing{trigger: trigger, duration: spec.Duration.Duration}
	if t.duration < 0 {
		return nil, &SpecError{Reason: ReasonInvalidDuration, Err: fmt.Errorf("spec.duration %s is negative", t.duration)}
	}
	return t, t.checkOverlap(spec, now)
}

// checkOverlap refuses a duration at least as long as the time between
// two consecutive starts (equal too, as Rancher Fleet does: the window
// would close at the moment the next opens), and an expression with
// fewer than two starts after now.
func (t *Timing) checkOverlap(spec fleet.ScheduleSpec, now time.Time) error {
	prev, ok := t.next(now)
	if !ok {
		return &SpecError{Reason: ReasonInvalidSchedule, Err: fmt.Errorf("spec.schedule %q never starts after %s", spec.Schedule, now.UTC().Format(time.RFC3339))}
	}
	for i := 0; i < overlapChecks; i++ {
		next, ok := t.next(prev)
		if !ok {
			if i == 0 {
				return &SpecError{Reason: ReasonInvalidSchedule, Err: fmt.Errorf("spec.schedule %q starts only once more (%s); a Schedule needs recurring starts", spec.Schedule, prev.UTC().Format(time.RFC3339))}
			}
			return nil
		}
		if gap := next.Sub(prev); t.duration >= gap {
			return &SpecError{Reason: ReasonInvalidDuration, Err: fmt.Errorf("spec.duration %s is too long: it overlaps the next start (%s starts %s after %s)",
				spec.Duration.Duration, spec.Schedule, gap, prev.UTC().Format(time.RFC3339))}
		}
		prev = next
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
// now-duration < s <= now. With several (not possible for a Timing that
// passed ParseTiming at about now), the last one decides when it closes.
func (t *Timing) At(now time.Time) Window {
	var w Window
	if t.duration > 0 {
		s, ok := t.next(now.Add(-t.duration))
		for i := 0; ok && !s.After(now) && i < overlapChecks; i++ {
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
