package dev.thaw.deploy;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import com.fasterxml.jackson.dataformat.yaml.YAMLMapper;
import io.fabric8.knative.serving.v1.Service;
import io.fabric8.kubernetes.api.model.ConfigMap;
import io.fabric8.kubernetes.api.model.Container;
import io.fabric8.kubernetes.api.model.KubernetesResource;
import io.fabric8.kubernetes.api.model.Namespace;
import io.fabric8.kubernetes.api.model.PodSpec;
import io.fabric8.kubernetes.api.model.Quantity;
import io.fabric8.kubernetes.api.model.Volume;
import io.fabric8.kubernetes.api.model.apps.DaemonSet;
import io.fabric8.kubernetes.api.model.node.v1.RuntimeClass;
import java.io.IOException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Validates every manifest under {@code deploy/kubernetes} by loading it into Fabric8's typed Kubernetes and
 * Knative models with unknown fields refused — Fabric8 keeps unknown fields in {@code additionalProperties}
 * instead of failing, so every object of the loaded graph is also checked to have none — and then checks what
 * Thaw needs of them: the RuntimeClass, the Knative flags each service depends on, contract mode's GPU,
 * readiness path and progress deadline, node mode's socket. Nothing here ran on a cluster (deploy/README.md).
 */
class ManifestsTest {

  private static final Path ROOT = findRoot().resolve("deploy/kubernetes");
  private static final ObjectMapper YAML = YAMLMapper.builder()
      .enable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
      .enable(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES)
      .enable(DeserializationFeature.FAIL_ON_READING_DUP_TREE_KEY)
      .build();
  private static final Map<String, Class<? extends KubernetesResource>> KINDS = Map.of(
      "node.k8s.io/v1 RuntimeClass", RuntimeClass.class,
      "v1 ConfigMap", ConfigMap.class,
      "v1 Namespace", Namespace.class,
      "apps/v1 DaemonSet", DaemonSet.class,
      "serving.knative.dev/v1 Service", Service.class);

  private static Path findRoot() {
    for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent()) {
      if (Files.isDirectory(p.resolve("deploy/kubernetes"))) {
        return p;
      }
    }
    throw new IllegalStateException("no deploy/kubernetes above " + Path.of("").toAbsolutePath());
  }

  /** Every document of every manifest, loaded into its typed model and checked. */
  static List<KubernetesResource> loadAll() throws IOException {
    List<KubernetesResource> all = new ArrayList<>();
    try (Stream<Path> files = Files.walk(ROOT)) {
      for (Path f : files.filter(p -> p.toString().endsWith(".yaml")).sorted().toList()) {
        all.addAll(load(Files.readString(f), ROOT.relativize(f).toString()));
      }
    }
    return all;
  }

  static List<KubernetesResource> load(String yaml, String name) throws IOException {
    List<KubernetesResource> out = new ArrayList<>();
    try (var parser = new YAMLFactory().createParser(yaml)) {
      for (JsonNode doc : YAML.readValues(parser, JsonNode.class).readAll()) {
        if (doc == null || doc.isNull() || doc.isEmpty()) {
          continue;
        }
        String key = doc.path("apiVersion").asText() + " " + doc.path("kind").asText();
        Class<? extends KubernetesResource> type = KINDS.get(key);
        if (type == null) {
          throw new IllegalArgumentException(name + ": no model for " + key);
        }
        KubernetesResource r;
        try {
          r = YAML.treeToValue(doc, type);
        } catch (IOException e) {
          throw new IllegalArgumentException(name + ": " + e.getMessage(), e);
        }
        List<String> unknown = new ArrayList<>();
        unknownFields(r, "", unknown, new IdentityHashMap<>());
        if (!unknown.isEmpty()) {
          throw new IllegalArgumentException(name + ": unknown fields " + unknown);
        }
        out.add(r);
      }
    }
    return out;
  }

  /** Walks the model's getters and collects every non-empty {@code additionalProperties}. */
  private static void unknownFields(Object o, String path, List<String> unknown, Map<Object, Boolean> seen) {
    if (o == null || seen.put(o, true) != null) {
      return;
    }
    if (o instanceof Collection<?> c) {
      int i = 0;
      for (Object x : c) {
        unknownFields(x, path + "[" + i++ + "]", unknown, seen);
      }
      return;
    }
    if (o instanceof Map<?, ?> m) {
      m.forEach((k, v) -> unknownFields(v, path + "." + k, unknown, seen));
      return;
    }
    if (!o.getClass().getPackageName().startsWith("io.fabric8")) {
      return;
    }
    for (Method getter : o.getClass().getMethods()) {
      if (getter.getParameterCount() != 0 || Modifier.isStatic(getter.getModifiers())
          || !getter.getName().startsWith("get") || getter.getName().equals("getClass")) {
        continue;
      }
      Object value;
      try {
        value = getter.invoke(o);
      } catch (ReflectiveOperationException e) {
        continue;
      }
      if (getter.getName().equals("getAdditionalProperties")) {
        if (value instanceof Map<?, ?> extra && !extra.isEmpty()) {
          unknown.add((path.isEmpty() ? "" : path + ".") + extra.keySet());
        }
      } else if (!(value instanceof Quantity)) {
        unknownFields(value, path + "." + getter.getName().substring(3, 4).toLowerCase()
            + getter.getName().substring(4), unknown, seen);
      }
    }
  }

  private static <T> List<T> all(List<KubernetesResource> rs, Class<T> type) {
    return rs.stream().filter(type::isInstance).map(type::cast).toList();
  }

  @Test
  void everyManifestLoadsIntoItsTypedModelWithNoUnknownField() throws IOException {
    List<KubernetesResource> all = loadAll();
    assertEquals(List.of("ConfigMap", "RuntimeClass", "Service", "Service", "Namespace", "DaemonSet"),
        all.stream().map(r -> r.getClass().getSimpleName()).toList());
  }

  @Test
  void aMisspelledOrMisplacedFieldIsRefused() {
    String typo = "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: thaw\nhandler: nvidia\n"
        + "sheduling:\n  nodeSelector: {a: b}\n";
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> load(typo, "typo.yaml"));
    assertTrue(e.getMessage().contains("sheduling"), e.getMessage());
    String nested = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  template:\n"
        + "    spec:\n      containers:\n        - image: x\n          readinessProbe:\n            httpGet:\n"
        + "              pathh: /v2/health/ready\n";
    e = assertThrows(IllegalArgumentException.class, () -> load(nested, "nested.yaml"));
    assertTrue(e.getMessage().contains("pathh"), e.getMessage());
    String wrongType = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata: [1, 2]\n";
    assertThrows(IllegalArgumentException.class, () -> load(wrongType, "type.yaml"));
  }

  @Test
  void theRuntimeClassSchedulesOntoThawNodesThroughTheNvidiaRuntime() throws IOException {
    RuntimeClass rc = all(loadAll(), RuntimeClass.class).get(0);
    assertEquals("thaw", rc.getMetadata().getName());
    assertEquals("nvidia", rc.getHandler());
    assertEquals("true", rc.getScheduling().getNodeSelector().get("thaw.dev/node"));
    assertTrue(rc.getScheduling().getTolerations().stream().anyMatch(t -> "thaw.dev/node".equals(t.getKey())));
  }

  @Test
  void everyKnativeFeatureAServiceUsesIsEnabled() throws IOException {
    List<KubernetesResource> rs = loadAll();
    ConfigMap features = all(rs, ConfigMap.class).stream()
        .filter(c -> c.getMetadata().getName().equals("config-features")).findFirst().orElseThrow();
    assertEquals("knative-serving", features.getMetadata().getNamespace());
    Map<String, String> flags = features.getData();
    for (Service s : all(rs, Service.class)) {
      var spec = s.getSpec().getTemplate().getSpec();
      String name = s.getMetadata().getName();
      if (spec.getRuntimeClassName() != null) {
        assertEquals("enabled", flags.get("kubernetes.podspec-runtimeclassname"), name);
        assertEquals("thaw", spec.getRuntimeClassName(), name);
      }
      if (spec.getInitContainers() != null && !spec.getInitContainers().isEmpty()) {
        assertEquals("enabled", flags.get("kubernetes.podspec-init-containers"), name);
      }
      for (Volume v : spec.getVolumes()) {
        if (v.getHostPath() != null) {
          assertEquals("enabled", flags.get("kubernetes.podspec-volumes-hostpath"), name + " " + v.getName());
        }
        if (v.getEmptyDir() != null) {
          assertEquals("enabled", flags.get("kubernetes.podspec-volumes-emptydir"), name + " " + v.getName());
        }
      }
      assertNotNull(s.getSpec().getTemplate().getMetadata().getAnnotations()
          .get("serving.knative.dev/progress-deadline"), name);
    }
  }

  @Test
  void contractModeServesOneFunctionOnOneGpuAndIsReadyOnlyWhenTheServerIs() throws IOException {
    Service s = all(loadAll(), Service.class).stream().filter(x -> x.getMetadata().getName().equals("gpt2"))
        .findFirst().orElseThrow();
    var spec = s.getSpec().getTemplate().getSpec();
    assertEquals(1, spec.getContainers().size());
    Container thaw = spec.getContainers().get(0);
    assertEquals(List.of("serve", "--host", "0.0.0.0", "--store", "/var/lib/thaw/store", "--function",
        "gpt2=gpt2:large"), thaw.getArgs());
    assertEquals(new Quantity("1"), thaw.getResources().getLimits().get("nvidia.com/gpu"));
    assertEquals("/v2/health/ready", thaw.getReadinessProbe().getHttpGet().getPath());
    assertEquals(8080, thaw.getPorts().get(0).getContainerPort());
    Container pull = spec.getInitContainers().get(0);
    assertEquals("pull", pull.getArgs().get(0));
    assertEquals(thaw.getImage(), pull.getImage());
    String deadline = s.getSpec().getTemplate().getMetadata().getAnnotations()
        .get("serving.knative.dev/progress-deadline");
    assertTrue(Integer.parseInt(deadline.replace("s", "")) > 120, "raised above Knative's 120 s default");
  }

  @Test
  void nodeModeSharesOneHostSocketBetweenTheDaemonSetAndTheProxies() throws IOException {
    List<KubernetesResource> rs = loadAll();
    DaemonSet ds = all(rs, DaemonSet.class).get(0);
    PodSpec node = ds.getSpec().getTemplate().getSpec();
    assertEquals("thaw", node.getRuntimeClassName());
    assertTrue(node.getContainers().get(0).getArgs().containsAll(List.of("--socket", "/run/thaw/thaw.sock")));
    assertTrue(node.getContainers().get(0).getEnv().stream()
        .anyMatch(e -> e.getName().equals("NVIDIA_VISIBLE_DEVICES") && e.getValue().equals("all")));
    String hostDir = node.getVolumes().stream().filter(v -> v.getName().equals("socket")).findFirst().orElseThrow()
        .getHostPath().getPath();
    assertEquals(all(rs, Namespace.class).get(0).getMetadata().getName(), ds.getMetadata().getNamespace());

    Service proxy = all(rs, Service.class).stream().filter(x -> x.getMetadata().getName().equals("gpt2-node"))
        .findFirst().orElseThrow();
    var spec = proxy.getSpec().getTemplate().getSpec();
    assertEquals(hostDir, spec.getVolumes().get(0).getHostPath().getPath());
    Container c = spec.getContainers().get(0);
    assertTrue(c.getArgs().contains("UNIX-CONNECT:/run/thaw/thaw.sock"), c.getArgs().toString());
    assertFalse(c.getResources().getLimits().containsKey("nvidia.com/gpu"), "the node server owns the GPUs");
  }
}
