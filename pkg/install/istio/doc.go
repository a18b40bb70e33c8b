// Package istio installs Istio's own control plane — the base and istiod
// charts Istio ships in its module's manifests/charts — into the clusters of
// an environment with the Helm SDK, through pkg/install/installer:
//
//	dir, err := istio.ChartsDir(ctx, istio.Version) // the module download's charts
//	in := istio.New(istio.WithCharts(dir))
//	res, err := in.Install(ctx, targets...)           // primaries, then remotes
//	res, err := in.Uninstall(ctx, targets...)         // remotes, then primaries
//
// The releases are istio-base and istiod in the values' global.istioNamespace
// (istio-system), as Istio's Helm guide names them. Each cluster gets the
// values `meshctl values render` gives it, plus the images (Images.Apply):
// by default the offline build of hack/e2e/istio-build, meshctl/pilot:<Version>,
// which the caller side-loads into kind nodes (SaveFromDocker, image.FromArchive,
// image.LoadArchives).
//
// In ambient mode (WithAmbient) istio-cni and ztunnel follow istiod
// (AmbientReleases): Istio's istio-cni enrolls the pods and serves ZDS, and
// Istio's ztunnel chart runs meshctl's dataplane image (Target.Ztunnel), so
// meshctl's proxy stands as ztunnel under every name Istio's tools look for,
// with istiod's CA and XDS. That chart gets values of its own: it reads the
// same top-level image and env as istiod's.
//
// Install checks every cluster's values and reachability before touching
// any; then installs, atomically, every cluster that runs its own control
// plane in parallel, then every remote whose primary succeeded. A rerun with
// nothing changed leaves every release "unchanged".
package istio
