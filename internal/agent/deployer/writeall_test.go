package deployer

import (
	"bytes"
	"reflect"
	"testing"
)

// Whatever objects decodeAll reads, writeAll writes them so that they read
// back the same: strings that YAML would take for something else (yes, ~,
// 0x1F, dates, numbers) stay strings, numbers stay numbers, and multi-line
// text, nesting and empty values survive.
func FuzzWriteAll(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  yes: \"yes\"\n  off: \"off\"\n  tilde: \"~\"\n  null: \"null\"\n  hex: \"0x1F\"\n  oct: \"012\"\n  date: \"2001-12-14\"\n  float: \"1e3\"\n  empty: \"\"\n  digits10: a\n  digits9: b\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  labels: {}\ndata:\n  script: |\n    #!/bin/sh\n    echo \"hi: there\"\n\n    exit 0\n  unicode: \"h\u00e9llo \u2603\"\n  tab: \"a\\tb\"\n  colon: \"a: b\"\n  lead: \" spaced \"\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: c\nspec:\n  replicas: 3\n  ratio: 0.5\n  big: 9007199254740993\n  neg: -12\n  small: 1.0e-7\n  on: true\n  none: null\n  list: [1, \"2\", [3], {a: b}, []]\n",
		"{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"d\"},\"stringData\":{\"k\":\"---\\n...\"}}",
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: e\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: f\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := decodeAll(data)
		if err != nil || len(objs) == 0 {
			return
		}
		var out bytes.Buffer
		if err := writeAll(&out, objs); err != nil {
			t.Fatalf("writeAll: %v", err)
		}
		again, err := decodeAll(out.Bytes())
		if err != nil {
			t.Fatalf("reading back %q: %v", out.String(), err)
		}
		if len(again) != len(objs) {
			t.Fatalf("%d objects read back, want %d:\n%s", len(again), len(objs), out.String())
		}
		for i := range objs {
			if !reflect.DeepEqual(objs[i].Object, again[i].Object) {
				t.Fatalf("object %d read back as\n%#v\nwant\n%#v\nfrom\n%s", i, again[i].Object, objs[i].Object, out.String())
			}
		}
	})
}
