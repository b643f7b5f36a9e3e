package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fleetgo/fleet/internal/statusview"
)

// plainRepeat is how often an unchanged view is printed again when the
// output is not a terminal, as `fleet dev up` repeats its progress line: a
// log then shows the view is still being watched.
const plainRepeat = 30 * time.Second

// frame is one rendering of the status view. key is the same view with the
// agents' "last seen" ages left out: agents check in every few seconds,
// which alone is no change worth printing the whole view again for.
type frame struct{ text, key []byte }

func renderFrame(v statusview.View, ro statusview.RenderOptions) (frame, error) {
	var text, key bytes.Buffer
	if err := statusview.Render(&text, v, ro); err != nil {
		return frame{}, err
	}
	// With no reference time every age renders alike ("just now", or
	// "never" for a cluster never seen).
	ro.Now, ro.Color = time.Time{}, false
	if err := statusview.Render(&key, v, ro); err != nil {
		return frame{}, err
	}
	return frame{text: text.Bytes(), key: key.Bytes()}, nil
}

// liveOptions configure the refreshing view.
type liveOptions struct {
	// every is the refresh interval.
	every time.Duration
	// terminal redraws the screen; otherwise snapshots are appended.
	terminal bool
	color    bool
	// repeat: an unchanged plain snapshot is printed again this long after
	// the last one.
	repeat time.Duration
}

// live refreshes the view until ctx ends. A failed refresh does not end it,
// so that a restarting API server does not stop the watch.
func live(ctx context.Context, out io.Writer, o liveOptions,
	snapshot func(context.Context, bool) (frame, error)) error {
	if o.every <= 0 {
		o.every = 2 * time.Second
	}
	screen := &screenView{out: out, every: o.every}
	plain := &plainLog{out: out, repeat: o.repeat}
	for {
		fr, err := snapshot(ctx, o.color)
		if err != nil && ctx.Err() != nil {
			return nil
		}
		var werr error
		if o.terminal {
			werr = screen.draw(fr, err, time.Now())
		} else {
			werr = plain.print(fr, err, time.Now())
		}
		if werr != nil {
			return werr
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.every):
		}
	}
}

// screenView redraws the whole terminal on every refresh. A failed refresh
// keeps the last picture and shows the error above it.
type screenView struct {
	out   io.Writer
	every time.Duration
	last  []byte
}

func (s *screenView) draw(fr frame, err error, now time.Time) error {
	header := fmt.Sprintf("fleet status — %s — refreshing every %s, Ctrl-C to quit\n\n", now.Format("15:04:05"), s.every)
	if err != nil {
		header += fmt.Sprintf("refresh failed: %v\n\n", err)
	} else {
		s.last = fr.text
	}
	_, werr := fmt.Fprint(s.out, "\x1b[H\x1b[2J"+header+string(s.last))
	return werr
}

// plainLog writes the view as a log for a pipe or a file: no escape
// sequences, and a snapshot only when it (or the refresh error) changed or
// repeat has passed, so that an unchanged fleet does not fill the file.
type plainLog struct {
	out       io.Writer
	repeat    time.Duration
	lastKey   []byte
	lastErr   string
	lastPrint time.Time
}

func (p *plainLog) print(fr frame, err error, now time.Time) error {
	due := p.lastPrint.IsZero() || now.Sub(p.lastPrint) >= p.repeat
	stamp := now.Format("15:04:05")
	var werr error
	if err != nil {
		if err.Error() == p.lastErr && !due {
			return nil
		}
		p.lastErr = err.Error()
		_, werr = fmt.Fprintf(p.out, "fleet status — %s — refresh failed: %v\n\n", stamp, err)
	} else {
		if bytes.Equal(fr.key, p.lastKey) && p.lastErr == "" && !due {
			return nil
		}
		p.lastKey, p.lastErr = fr.key, ""
		_, werr = fmt.Fprintf(p.out, "fleet status — %s — printed when it changes and every %s, Ctrl-C to quit\n\n%s\n",
			stamp, p.repeat, fr.text)
	}
	p.lastPrint = now
	return werr
}
