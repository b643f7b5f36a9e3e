package statuswrite

import (
	"context"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// store stands for the API server behind Write's Patch and Get: one
// object (a ConfigMap whose data holds an "input" and the "status"
// derived from it), nil once deleted, and the optimistic lock a patch
// carries. It lets the table check the loop's own decisions; the callers'
// envtest tests check the same against a real API server.
type store struct {
	obj *corev1.ConfigMap
	// patchErr, when set, is what every patch fails with.
	patchErr      error
	patches, gets int
}

var gr = schema.GroupResource{Resource: "configmaps"}

func (s *store) patch(_ context.Context, cur, base *corev1.ConfigMap) error {
	s.patches++
	switch {
	case s.patchErr != nil:
		return s.patchErr
	case s.obj == nil:
		return apierrors.NewNotFound(gr, cur.Name)
	case base.ResourceVersion != s.obj.ResourceVersion:
		return apierrors.NewConflict(gr, cur.Name, nil)
	}
	rv, _ := strconv.Atoi(s.obj.ResourceVersion)
	stored := s.obj.DeepCopy()
	stored.Data["status"] = cur.Data["status"]
	stored.ResourceVersion = strconv.Itoa(rv + 1)
	s.obj = stored
	stored.DeepCopyInto(cur)
	return nil
}

func (s *store) get(_ context.Context, key client.ObjectKey) (*corev1.ConfigMap, error) {
	s.gets++
	if s.obj == nil {
		return nil, apierrors.NewNotFound(gr, key.Name)
	}
	return s.obj.DeepCopy(), nil
}

func configMap(rv, input, status string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: rv},
		Data:       map[string]string{"input": input, "status": status},
	}
}

// TestWrite: Write skips a status equal to a copy it can trust, compares
// one the cache may hold stale with the API server's, derives the status
// again from the API server's copy after a conflict, and gives up on
// conflicts after MaxAttempts; an object gone is no error.
func TestWrite(t *testing.T) {
	key := client.ObjectKey{Namespace: "ns", Name: "a"}
	for _, tc := range []struct {
		name string
		// wrote is the resourceVersion this process last wrote, if any.
		wrote string
		// cached is the copy Write starts from, stored the API server's.
		cached, stored *corev1.ConfigMap
		patchErr       error
		wantErr        func(error) bool
		// wantStatus is the status stored at the end ("" when gone).
		wantStatus     string
		wantPatches    int
		wantGets       int
		wantWritten    int
		wantRecordedRV string
	}{
		{
			name:   "unchanged, cache trusted",
			cached: configMap("1", "x", "ready x"), stored: configMap("1", "x", "ready x"),
			wantStatus: "ready x", wantRecordedRV: "1",
		},
		{
			name:  "unchanged against a cache behind the last write",
			wrote: "2", cached: configMap("1", "x", "ready x"), stored: configMap("2", "x", "waiting"),
			wantStatus: "ready x", wantPatches: 1, wantGets: 1, wantWritten: 1, wantRecordedRV: "3",
		},
		{
			name:  "unchanged against a cache behind, and so is the API server",
			wrote: "2", cached: configMap("1", "x", "ready x"), stored: configMap("2", "x", "ready x"),
			wantStatus: "ready x", wantGets: 1, wantRecordedRV: "2",
		},
		{
			name:   "changed",
			cached: configMap("1", "x", "waiting"), stored: configMap("1", "x", "waiting"),
			wantStatus: "ready x", wantPatches: 1, wantWritten: 1, wantRecordedRV: "2",
		},
		{
			name:   "conflict: derived again from the API server's copy",
			cached: configMap("1", "x", "waiting"), stored: configMap("2", "y", "waiting"),
			wantStatus: "ready y", wantPatches: 2, wantGets: 1, wantWritten: 1, wantRecordedRV: "3",
		},
		{
			name:   "conflicts past MaxAttempts",
			cached: configMap("1", "x", "waiting"), stored: configMap("1", "x", "waiting"),
			patchErr: apierrors.NewConflict(gr, "a", nil), wantErr: apierrors.IsConflict,
			wantStatus: "waiting", wantPatches: MaxAttempts, wantGets: MaxAttempts - 1,
		},
		{
			name:   "other patch error",
			cached: configMap("1", "x", "waiting"), stored: configMap("1", "x", "waiting"),
			patchErr: apierrors.NewForbidden(gr, "a", nil), wantErr: apierrors.IsForbidden,
			wantStatus: "waiting", wantPatches: 1,
		},
		{
			name:        "gone before the patch",
			cached:      configMap("1", "x", "waiting"),
			wantPatches: 1,
		},
		{
			name:   "gone before the re-read",
			wrote:  "2",
			cached: configMap("1", "x", "ready x"), wantGets: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &store{obj: tc.stored, patchErr: tc.patchErr}
			v := &Versions{}
			if tc.wrote != "" {
				v.Wrote(key, tc.wrote)
			}
			written := 0
			err := Write(context.Background(), tc.cached, Options[*corev1.ConfigMap]{
				Versions: v,
				Compute:  func(cur *corev1.ConfigMap) { cur.Data["status"] = "ready " + cur.Data["input"] },
				Equal:    func(a, b *corev1.ConfigMap) bool { return a.Data["status"] == b.Data["status"] },
				Patch:    s.patch,
				Get:      s.get,
				Written: func(before, after *corev1.ConfigMap) {
					written++
					if before.Data["status"] == after.Data["status"] {
						t.Errorf("Written(%v, %v): no change", before.Data, after.Data)
					}
				},
			})
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("Write: %v", err)
			}
			status := ""
			if s.obj != nil {
				status = s.obj.Data["status"]
			}
			if status != tc.wantStatus {
				t.Errorf("stored status %q, want %q", status, tc.wantStatus)
			}
			if s.patches != tc.wantPatches || s.gets != tc.wantGets || written != tc.wantWritten {
				t.Errorf("%d patches, %d reads, %d written; want %d, %d, %d",
					s.patches, s.gets, written, tc.wantPatches, tc.wantGets, tc.wantWritten)
			}
			// Recorded: a cached copy at that version is trusted, one at
			// another is not.
			if tc.wantRecordedRV != "" && (v.SkipEqual(key, "0", false) || !v.SkipEqual(key, tc.wantRecordedRV, false)) {
				t.Errorf("resourceVersion %s not recorded", tc.wantRecordedRV)
			}
		})
	}
}
