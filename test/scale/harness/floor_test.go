package harness

import (
	"errors"
	"slices"
	"testing"
)

func TestMedianFloor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		trips     []float64
		want      float64
		wantRound []float64
	}{
		{"one round keeps it", []float64{4}, 4, nil},
		{"odd: the middle one", []float64{5.1, 2.4, 3.0}, 3.0, []float64{5.1, 2.4, 3.0}},
		{"even: the mean of the middle two", []float64{2, 6, 3, 4}, 3.5, []float64{2, 6, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			f, err := medianFloor(len(tc.trips), func() (Floor, error) {
				i++
				return Floor{N: 10, RoundTripSeconds: tc.trips[i-1], DeliveredSeconds: tc.trips[i-1] / 2}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if f.RoundTripSeconds != tc.want || f.DeliveredSeconds != tc.want/2 || f.N != 10 {
				t.Errorf("got %+v, want round trip %v", f, tc.want)
			}
			if !slices.Equal(f.Rounds, tc.wantRound) {
				t.Errorf("rounds %v, want %v", f.Rounds, tc.wantRound)
			}
		})
	}
	calls := 0
	if _, err := medianFloor(3, func() (Floor, error) { calls++; return Floor{}, errors.New("boom") }); err == nil || calls != 1 {
		t.Errorf("a failed round: err %v after %d calls, want the error at once", err, calls)
	}
}
