package harness

import (
	"fmt"
	"os"
	"path/filepath"

	fleet "github.com/fleetgo/fleet/api/v1alpha1"
)

// shardOf is the shard that owns bundle i: with sc.Shards > 0 the bundles
// are spread round-robin over shards "s0".."s<n-1>", each run by its own
// manager process; "" means the unsharded manager.
func shardOf(sc Scenario, i int) string {
	if sc.Shards <= 0 {
		return ""
	}
	return fmt.Sprintf("s%d", i%sc.Shards)
}

// labelShard puts bundle b (number i) into its shard.
func labelShard(sc Scenario, i int, b *fleet.Bundle) {
	if id := shardOf(sc, i); id != "" {
		if b.Labels == nil {
			b.Labels = map[string]string{}
		}
		b.Labels[fleet.ShardLabel] = id
	}
}

// startShards starts one manager process per shard of sc (none when
// sc.Shards is 0), next to the unsharded one that keeps registration and
// cluster status. Each logs into its own directory under dir.
func startShards(sc Scenario, dir string, base childConfig) ([]*child, error) {
	var out []*child
	for i := range sc.Shards {
		cfg := base
		cfg.ShardID = fmt.Sprintf("s%d", i)
		d := filepath.Join(dir, "shard-"+cfg.ShardID)
		if err := os.MkdirAll(d, 0o755); err != nil {
			stopAll(out)
			return nil, err
		}
		c, err := startChild("manager", d, cfg)
		if err != nil {
			stopAll(out)
			return nil, fmt.Errorf("shard %s: %w", cfg.ShardID, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func stopAll(children []*child) {
	for _, c := range children {
		c.stop()
	}
}

// shardCPUSeconds is the CPU the shard managers used so far.
func shardCPUSeconds(children []*child) float64 {
	total := 0.0
	for _, c := range children {
		total += CPUSeconds(c.pid())
	}
	return total
}
