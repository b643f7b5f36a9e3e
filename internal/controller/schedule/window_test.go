package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func spec(cron string, d time.Duration, loc string) fleet.ScheduleSpec {
	return fleet.ScheduleSpec{Schedule: cron, Duration: metav1.Duration{Duration: d}, Location: loc}
}

// TestWindowAt: whether a moment is inside a window, when that window
// closes and when the next one opens, in the Schedule's time zone.
func TestWindowAt(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec      fleet.ScheduleSpec
		now       string
		active    bool
		end       string
		nextStart string
		boundary  string
	}{
		{name: "inside a daily window", spec: spec("0 0 12 * * *", time.Hour, "UTC"), now: "2030-06-15T12:30:00Z",
			active: true, end: "2030-06-15T13:00:00Z", nextStart: "2030-06-16T12:00:00Z", boundary: "2030-06-15T13:00:00Z"},
		{name: "just before it opens", spec: spec("0 0 12 * * *", time.Hour, "UTC"), now: "2030-06-15T11:59:59.999Z",
			nextStart: "2030-06-15T12:00:00Z", boundary: "2030-06-15T12:00:00Z"},
		{name: "open at its start", spec: spec("0 0 12 * * *", time.Hour, "UTC"), now: "2030-06-15T12:00:00Z",
			active: true, end: "2030-06-15T13:00:00Z", nextStart: "2030-06-16T12:00:00Z", boundary: "2030-06-15T13:00:00Z"},
		{name: "closed at its end", spec: spec("0 0 12 * * *", time.Hour, "UTC"), now: "2030-06-15T13:00:00Z",
			nextStart: "2030-06-16T12:00:00Z", boundary: "2030-06-16T12:00:00Z"},
		{name: "every minute, first half", spec: spec("0 * * * * *", 30*time.Second, "UTC"), now: "2030-06-15T08:07:29.9Z",
			active: true, end: "2030-06-15T08:07:30Z", nextStart: "2030-06-15T08:08:00Z", boundary: "2030-06-15T08:07:30Z"},
		{name: "every minute, second half", spec: spec("0 * * * * *", 30*time.Second, "UTC"), now: "2030-06-15T08:07:45Z",
			nextStart: "2030-06-15T08:08:00Z", boundary: "2030-06-15T08:08:00Z"},
		{name: "location: 14:00 in Berlin is 12:00 UTC in summer", spec: spec("0 0 14 * * *", time.Hour, "Europe/Berlin"), now: "2030-06-15T12:30:00Z",
			active: true, end: "2030-06-15T13:00:00Z", nextStart: "2030-06-16T12:00:00Z", boundary: "2030-06-15T13:00:00Z"},
		{name: "location: the same expression in UTC", spec: spec("0 0 14 * * *", time.Hour, "UTC"), now: "2030-06-15T12:30:00Z",
			nextStart: "2030-06-15T14:00:00Z", boundary: "2030-06-15T14:00:00Z"},
		{name: "DST: noon in New York before the switch (EST)", spec: spec("0 0 12 * * *", time.Hour, "America/New_York"), now: "2030-03-09T17:30:00Z",
			active: true, end: "2030-03-09T18:00:00Z", nextStart: "2030-03-10T16:00:00Z", boundary: "2030-03-09T18:00:00Z"},
		{name: "DST: noon in New York on the day of the switch (EDT)", spec: spec("0 0 12 * * *", time.Hour, "America/New_York"), now: "2030-03-10T16:30:00Z",
			active: true, end: "2030-03-10T17:00:00Z", nextStart: "2030-03-11T16:00:00Z", boundary: "2030-03-10T17:00:00Z"},
		{name: "DST: an hour later is outside", spec: spec("0 0 12 * * *", time.Hour, "America/New_York"), now: "2030-03-10T17:30:00Z",
			nextStart: "2030-03-11T16:00:00Z", boundary: "2030-03-11T16:00:00Z"},
		{name: "weekdays only: Saturday waits for Monday", spec: spec("0 0 9 ? * MON-FRI", 8*time.Hour, "UTC"), now: "2030-06-15T10:00:00Z",
			nextStart: "2030-06-17T09:00:00Z", boundary: "2030-06-17T09:00:00Z"},
		{name: "overlapping windows merge", spec: spec("0 0 1,2 * * ?", 90*time.Minute, "UTC"), now: "2030-06-15T02:15:00Z",
			active: true, end: "2030-06-15T03:30:00Z", nextStart: "2030-06-16T01:00:00Z", boundary: "2030-06-15T03:30:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := at(tc.now)
			timing, err := ParseTiming(tc.spec, now)
			if err != nil {
				t.Fatal(err)
			}
			w := timing.At(now)
			if w.Active != tc.active {
				t.Errorf("active %v, want %v", w.Active, tc.active)
			}
			if tc.end != "" && !w.End.Equal(at(tc.end)) {
				t.Errorf("end %s, want %s", w.End.UTC(), tc.end)
			}
			if !w.NextStart.Equal(at(tc.nextStart)) {
				t.Errorf("next start %s, want %s", w.NextStart.UTC(), tc.nextStart)
			}
			if !w.NextBoundary().Equal(at(tc.boundary)) {
				t.Errorf("next boundary %s, want %s", w.NextBoundary().UTC(), tc.boundary)
			}
		})
	}
}

// TestParseTimingRefuses: specs the controller cannot act on give an
// error with the Ready reason and a message naming the field.
func TestParseTimingRefuses(t *testing.T) {
	now := at("2030-06-15T01:30:00Z")
	for _, tc := range []struct {
		name   string
		spec   fleet.ScheduleSpec
		reason string
		msg    string
	}{
		{name: "not a cron expression", spec: spec("every day", time.Hour, "UTC"), reason: ReasonInvalidSchedule, msg: `spec.schedule "every day"`},
		{name: "five fields (no seconds)", spec: spec("0 12 * * *", time.Hour, "UTC"), reason: ReasonInvalidSchedule, msg: `spec.schedule "0 12 * * *"`},
		{name: "empty", spec: spec("", time.Hour, "UTC"), reason: ReasonInvalidSchedule, msg: "spec.schedule is empty"},
		{name: "unknown time zone", spec: spec("0 0 12 * * *", time.Hour, "Mars/Olympus"), reason: ReasonInvalidLocation, msg: `unknown time zone "Mars/Olympus"`},
		{name: "never starts again", spec: spec("0 0 0 1 1 ? 2020", time.Hour, "UTC"), reason: ReasonInvalidSchedule, msg: "never starts again"},
		{name: "starts only once more", spec: spec("0 0 0 1 1 ? 2031", time.Hour, "UTC"), reason: ReasonInvalidSchedule, msg: "starts only once more"},
		{name: "negative duration", spec: spec("0 0 12 * * *", -time.Hour, "UTC"), reason: ReasonInvalidDuration, msg: "positive duration"},
		// Rancher Fleet takes it and closes each window as it opens.
		{name: "zero (or omitted) duration", spec: spec("0 0 12 * * *", 0, "UTC"), reason: ReasonInvalidDuration, msg: "spec.duration 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTiming(tc.spec, now)
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("error %v, want a SpecError", err)
			}
			if se.Reason != tc.reason || !strings.Contains(se.Error(), tc.msg) {
				t.Errorf("got %s: %q, want %s containing %q", se.Reason, se.Error(), tc.reason, tc.msg)
			}
		})
	}
	if _, err := ParseTiming(spec("0 * * * * *", 59*time.Second, ""), now); err != nil {
		t.Errorf("59s every minute in the local zone: %v", err)
	}
	if _, err := ParseTiming(spec("0 0 0 1 1 ? 2031", time.Hour, "UTC"), now.Add(24*time.Hour)); err == nil ||
		err.Error() != mustErr(ParseTiming(spec("0 0 0 1 1 ? 2031", time.Hour, "UTC"), now)).Error() {
		t.Errorf("the message changed with the moment: %v", err)
	}
}

func mustErr(_ *Timing, err error) error { return err }

// TestCheckOverlap is Rancher Fleet's rule: the duration must be shorter
// than the time between the next two starts after now. Expressions whose
// gaps are uneven are accepted when the next gap is long enough, as in
// Rancher Fleet (At then merges windows that overlap).
func TestCheckOverlap(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec fleet.ScheduleSpec
		now  string
		ok   bool
	}{
		{name: "duration equal to the interval", spec: spec("0 * * * * *", time.Minute, "UTC"), now: "2030-06-15T01:30:00Z"},
		{name: "duration longer than the interval", spec: spec("0 * * * * *", 61*time.Second, "UTC"), now: "2030-06-15T01:30:00Z"},
		{name: "one second shorter", spec: spec("0 * * * * *", 59*time.Second, "UTC"), now: "2030-06-15T01:30:00Z", ok: true},
		{name: "fractions of a second do not count", spec: spec("0 * * * * *", 59*time.Second+900*time.Millisecond, "UTC"), now: "2030-06-15T01:30:00Z", ok: true},
		{name: "uneven gaps: the next gap is 1h", spec: spec("0 0 1,2 * * ?", 90*time.Minute, "UTC"), now: "2030-06-15T00:30:00Z"},
		{name: "uneven gaps: the next gap is 23h", spec: spec("0 0 1,2 * * ?", 90*time.Minute, "UTC"), now: "2030-06-15T01:30:00Z", ok: true},
		// 23h daily in Berlin: valid except next to a daylight saving
		// change (the day of the spring change lasts 23 hours).
		{name: "23h daily in Berlin, 60 days before DST", spec: spec("0 0 1 * * ?", 23*time.Hour, "Europe/Berlin"), now: "2030-01-30T12:00:00Z", ok: true},
		{name: "23h daily in Berlin, the day before DST", spec: spec("0 0 1 * * ?", 23*time.Hour, "Europe/Berlin"), now: "2030-03-30T12:00:00Z"},
		{name: "29 days monthly in June", spec: spec("0 0 0 1 * ?", 696*time.Hour, "UTC"), now: "2030-06-15T12:00:00Z", ok: true},
		{name: "29 days monthly in January", spec: spec("0 0 0 1 * ?", 696*time.Hour, "UTC"), now: "2031-01-15T12:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := at(tc.now)
			timing, err := ParseTiming(tc.spec, now)
			if err != nil {
				t.Fatal(err)
			}
			err = timing.CheckOverlap(now)
			var se *SpecError
			if tc.ok != (err == nil) || (err != nil && (!errors.As(err, &se) || se.Reason != ReasonInvalidDuration || !strings.Contains(err.Error(), "too long"))) {
				t.Errorf("got %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestWakeAfterNeverBeforeTheBoundary: the wake-up lands after the next
// window start or end, within a second; an invalid Schedule, or one whose
// next boundary is far, is looked at again after a day.
func TestWakeAfterNeverBeforeTheBoundary(t *testing.T) {
	now := at("2030-06-15T12:30:00Z")
	open := Evaluation{Window: Window{Active: true, End: now.Add(10 * time.Second), NextStart: now.Add(time.Hour)}}
	closed := Evaluation{Window: Window{NextStart: now.Add(5 * time.Minute)}}
	for i := 0; i < 100; i++ {
		if d := wakeAfter(open, now); d <= 10*time.Second || d > 11*time.Second+10*time.Millisecond {
			t.Fatalf("open window ending in 10s: wake after %s", d)
		}
		if d := wakeAfter(closed, now); d <= 5*time.Minute || d > 5*time.Minute+time.Second+10*time.Millisecond {
			t.Fatalf("next start in 5m: wake after %s", d)
		}
	}
	if d := wakeAfter(Evaluation{Err: &SpecError{Reason: ReasonInvalidSchedule, Err: errors.New("x")}}, now); d != maxWait {
		t.Errorf("invalid: wake after %s, want %s", d, maxWait)
	}
	if d := wakeAfter(Evaluation{Window: Window{NextStart: now.Add(400 * 24 * time.Hour)}}, now); d != maxWait {
		t.Errorf("next start in 400 days: wake after %s, want %s", d, maxWait)
	}
}
