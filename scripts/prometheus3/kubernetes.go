// Package kubernetes replaces Prometheus's Kubernetes service discovery in fioscope's build of Prometheus 3
// (scripts/setup.sh). promtool imports that package for one type switch in `check config`; the package compiles
// client-go, half of promtool's cold build. The rest of service discovery is already left out by Prometheus's own
// remove_all_sd tag, and fioscope's configs use file_sd alone: this type is never registered, so a config naming
// kubernetes_sd_configs is refused as an unknown field rather than read.
package kubernetes

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/config"

	"github.com/prometheus/prometheus/discovery"
)

// SDConfig has the one field promtool reads.
type SDConfig struct {
	HTTPClientConfig config.HTTPClientConfig
}

// Name implements discovery.Config.
func (*SDConfig) Name() string { return "kubernetes" }

// NewDiscoverer implements discovery.Config.
func (*SDConfig) NewDiscoverer(discovery.DiscovererOptions) (discovery.Discoverer, error) {
	return nil, errors.New("kubernetes service discovery is not in this build (fioscope's scripts/setup.sh)")
}

// NewDiscovererMetrics implements discovery.Config.
func (*SDConfig) NewDiscovererMetrics(prometheus.Registerer, discovery.RefreshMetricsInstantiator) discovery.DiscovererMetrics {
	return nil
}
