package payload_test

import (
	"errors"
	"testing"

	"github.com/fleetgo/fleet/internal/gitops/webhook/payload"
	"github.com/fleetgo/fleet/internal/gitops/webhook/webhooktest"
)

// TestBitbucketCloudHookUUID: Fleet's `bitbucket` key holds the webhook's
// UUID, which Bitbucket Cloud sends as X-Hook-UUID on webhooks without a
// secret. A request without a signature is accepted when the UUID matches;
// a wrong or missing UUID is refused as unsigned. A signature the key does
// not verify still passes when the UUID is the key, as in Fleet, which
// checks only the UUID: a Fleet setup whose key is the webhook's UUID keeps
// working once the webhook gets a secret on Bitbucket's side.
func TestBitbucketCloudHookUUID(t *testing.T) {
	h, body := webhooktest.Push(payload.Bitbucket, "https://bitbucket.org/example/fleet-apps", commit)
	secrets := payload.Secrets{string(payload.Bitbucket): webhooktest.BitbucketHookUUID + "\n"}
	if err := payload.Verify(payload.Bitbucket, request(h.Clone(), body), body, secrets); err != nil {
		t.Fatalf("matching UUID: %v", err)
	}
	wrong := h.Clone()
	wrong.Set("X-Hook-UUID", "00000000-0000-0000-0000-000000000000")
	// Refused as unsigned (401), like a request with no UUID.
	if err := payload.Verify(payload.Bitbucket, request(wrong, body), body, secrets); !errors.Is(err, payload.ErrMissingSig) {
		t.Fatalf("wrong UUID: %v", err)
	}
	none := h.Clone()
	none.Del("X-Hook-UUID")
	if err := payload.Verify(payload.Bitbucket, request(none, body), body, secrets); !errors.Is(err, payload.ErrMissingSig) {
		t.Fatalf("no UUID: %v", err)
	}
	if err := payload.Verify(payload.Bitbucket, request(h.Clone(), body), body, payload.Secrets{}); !errors.Is(err, payload.ErrNoSecret) {
		t.Fatalf("no secret: %v", err)
	}
	badSig := h.Clone()
	webhooktest.Sign(payload.Bitbucket, badSig, body, "not-the-uuid")
	if err := payload.Verify(payload.Bitbucket, request(badSig, body), body, secrets); err != nil {
		t.Fatalf("signature the key does not verify, with the right UUID: %v", err)
	}
	badSig.Set("X-Hook-UUID", "00000000-0000-0000-0000-000000000000")
	if err := payload.Verify(payload.Bitbucket, request(badSig, body), body, secrets); !errors.Is(err, payload.ErrBadSignature) {
		t.Fatalf("bad signature with a wrong UUID: %v", err)
	}
	badSig.Del("X-Hook-UUID")
	if err := payload.Verify(payload.Bitbucket, request(badSig, body), body, secrets); !errors.Is(err, payload.ErrBadSignature) {
		t.Fatalf("bad signature without a UUID: %v", err)
	}
	// A key that is an HMAC secret (not a UUID) is never matched by an
	// empty or other UUID: an HMAC-only setup is unchanged.
	hmacOnly := payload.Secrets{string(payload.Bitbucket): "hmac-secret"}
	good := h.Clone()
	webhooktest.Sign(payload.Bitbucket, good, body, "hmac-secret")
	if err := payload.Verify(payload.Bitbucket, request(good, body), body, hmacOnly); err != nil {
		t.Fatalf("right HMAC: %v", err)
	}
	forged := h.Clone()
	webhooktest.Sign(payload.Bitbucket, forged, body, "forged")
	if err := payload.Verify(payload.Bitbucket, request(forged, body), body, hmacOnly); !errors.Is(err, payload.ErrBadSignature) {
		t.Fatalf("forged HMAC with an HMAC-secret key: %v", err)
	}
	// Bitbucket Server has no UUID: its key is an HMAC secret only.
	hs, sbody := webhooktest.Push(payload.BitbucketServer, "https://bitbucket.example.com/scm/ex/fleet-apps.git", commit)
	hs.Set("X-Hook-UUID", webhooktest.BitbucketHookUUID)
	server := payload.Secrets{string(payload.BitbucketServer): webhooktest.BitbucketHookUUID}
	if err := payload.Verify(payload.BitbucketServer, request(hs, sbody), sbody, server); !errors.Is(err, payload.ErrMissingSig) {
		t.Fatalf("Bitbucket Server with a UUID: %v", err)
	}
}
