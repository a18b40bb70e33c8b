package meshtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/meshctl/meshctl/internal/parallel"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// FieldManager is the server-side apply field manager of Apply.
const FieldManager = "meshtest"

// ForEachCluster runs f in every cluster at once. Each call gets its own
// Gomega: a failed assertion stops that cluster's call only, and the spec
// then fails once, with every cluster's failure under its name.
func (e *Env) ForEachCluster(f func(g gomega.Gomega, c *Cluster)) {
	ginkgo.GinkgoHelper()
	if err := e.forEach(f); err != nil {
		ginkgo.Fail(err.Error())
	}
}

// stopCluster is what a per-cluster Gomega panics with to end that call.
type stopCluster struct{ msg string }

func (e *Env) forEach(f func(g gomega.Gomega, c *Cluster)) error {
	return parallel.ForEach(e.clusters, func(c *Cluster) (err error) {
		defer ginkgo.GinkgoRecover()
		defer func() {
			if r := recover(); r != nil {
				s, ok := r.(stopCluster)
				if !ok {
					panic(r) // a panic or a ginkgo.Fail: GinkgoRecover reports it
				}
				err = fmt.Errorf("in cluster %s: %s", c.Name, s.msg)
			}
		}()
		g := gomega.NewGomega(func(msg string, _ ...int) { panic(stopCluster{msg}) })
		f(g, c)
		return nil
	})
}

// CreateNamespace creates namespace name, with labels, in every cluster at
// once, and deletes it from every cluster at DeferCleanup. A name ending in
// "-" gets a random suffix, the same everywhere (unique per parallel
// process); the name is returned. A namespace still terminating from an
// earlier spec is waited for; one that exists and is not going away fails
// the spec: a test needs a namespace it knows the contents of.
func (e *Env) CreateNamespace(ctx context.Context, name string, labels map[string]string) string {
	ginkgo.GinkgoHelper()
	name, err := e.createNamespace(ctx, name, labels)
	if name != "" {
		ginkgo.DeferCleanup(func(ctx ginkgo.SpecContext) error { return e.deleteNamespace(ctx, name) })
	}
	if err != nil {
		ginkgo.Fail(err.Error())
	}
	return name
}

func (e *Env) createNamespace(ctx context.Context, name string, labels map[string]string) (string, error) {
	if strings.HasSuffix(name, "-") {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		name += hex.EncodeToString(b)
	}
	err := parallel.ForEach(e.clusters, func(c *Cluster) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		for {
			_, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
			if !apierrors.IsAlreadyExists(err) {
				if err != nil {
					return fmt.Errorf("cluster %s: creating namespace %s: %w", c.Name, name, err)
				}
				return nil
			}
			cur, err := c.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if err == nil && cur.DeletionTimestamp == nil {
				return fmt.Errorf("cluster %s: namespace %s already exists (left by an earlier run? delete it: kubectl --kubeconfig %s delete namespace %s)", c.Name, name, c.Kubeconfig, name)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("cluster %s: namespace %s is still terminating: %w", c.Name, name, context.Cause(ctx))
			case <-time.After(time.Second):
			}
		}
	})
	return name, err
}

// deleteNamespace deletes the namespace everywhere without waiting for it
// to go: the next spec that wants the name waits instead.
func (e *Env) deleteNamespace(ctx context.Context, name string) error {
	return parallel.ForEach(e.clusters, func(c *Cluster) error {
		err := c.Kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %s: deleting namespace %s: %w", c.Name, name, err)
		}
		return nil
	})
}

// Apply server-side applies manifests (YAML, documents separated by ---) in
// every cluster at once, in document order. Namespaced objects without a
// namespace go to namespace. Kinds defined by CRDs earlier in the same
// manifests are found once their CRD is served. Objects are not deleted at
// cleanup: put them in a namespace from CreateNamespace.
func (e *Env) Apply(ctx context.Context, namespace, manifests string) {
	ginkgo.GinkgoHelper()
	objs, err := decodeManifests(manifests)
	if err == nil {
		err = parallel.ForEach(e.clusters, func(c *Cluster) error { return c.apply(ctx, namespace, objs) })
	}
	if err != nil {
		ginkgo.Fail(err.Error())
	}
}

// Apply server-side applies manifests in this cluster only (see Env.Apply).
func (c *Cluster) Apply(ctx context.Context, namespace, manifests string) {
	ginkgo.GinkgoHelper()
	objs, err := decodeManifests(manifests)
	if err == nil {
		err = c.apply(ctx, namespace, objs)
	}
	if err != nil {
		ginkgo.Fail(err.Error())
	}
}

func decodeManifests(manifests string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for i := 1; ; i++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("manifests, document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue // an empty document, e.g. after a trailing ---
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("manifests, document %d: apiVersion, kind and metadata.name are required", i)
		}
		out = append(out, u)
	}
}

// mappingWait bounds how long Apply waits for a kind to be served (a CRD
// applied just before takes a moment to be established).
const mappingWait = 30 * time.Second

func (c *Cluster) apply(ctx context.Context, namespace string, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		what := fmt.Sprintf("%s %s", gvk.Kind, obj.GetName())
		mapping, err := c.mapping(ctx, obj)
		if err != nil {
			return fmt.Errorf("cluster %s: %s: %w", c.Name, what, err)
		}
		obj = obj.DeepCopy()
		res := c.Dynamic.Resource(mapping.Resource)
		var data []byte
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(namespace)
			}
			if obj.GetNamespace() == "" {
				return fmt.Errorf("cluster %s: %s is namespaced, but neither it nor Apply names a namespace", c.Name, what)
			}
			what = fmt.Sprintf("%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName())
			if data, err = obj.MarshalJSON(); err == nil {
				_, err = res.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)})
			}
		} else if data, err = obj.MarshalJSON(); err == nil {
			_, err = res.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)})
		}
		if err != nil {
			return fmt.Errorf("cluster %s: applying %s: %w", c.Name, what, err)
		}
	}
	return nil
}

// mapping finds obj's resource, rediscovering while the kind is unknown.
func (c *Cluster) mapping(ctx context.Context, obj *unstructured.Unstructured) (*meta.RESTMapping, error) {
	gvk := obj.GroupVersionKind()
	deadline := time.Now().Add(mappingWait)
	for {
		m, err := c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			return m, nil
		}
		if !meta.IsNoMatchError(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("the API server does not serve %s: %w", gvk, err)
		}
		c.Mapper.Reset()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(time.Second):
		}
	}
}

func ptr[T any](v T) *T { return &v }
