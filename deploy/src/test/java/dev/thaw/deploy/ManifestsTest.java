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
import dev.thaw.cli.ThawCli;
import io.fabric8.knative.serving.v1.Service;
import io.fabric8.kubernetes.api.model.ConfigMap;
import io.fabric8.kubernetes.api.model.Container;
import io.fabric8.kubernetes.api.model.EnvVar;
import io.fabric8.kubernetes.api.model.HasMetadata;
import io.fabric8.kubernetes.api.model.KubernetesResource;
import io.fabric8.kubernetes.api.model.Namespace;
import io.fabric8.kubernetes.api.model.PodSpec;
import io.fabric8.kubernetes.api.model.Quantity;
import io.fabric8.kubernetes.api.model.Volume;
import io.fabric8.kubernetes.api.model.apps.DaemonSet;
import io.fabric8.kubernetes.api.model.networking.v1.NetworkPolicy;
import io.fabric8.kubernetes.api.model.node.v1.RuntimeClass;
import java.io.IOException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * Validates every manifest under {@code deploy/kubernetes} by loading it into Fabric8's typed Kubernetes and
 * Knative models with unknown fields refused — Fabric8 keeps unknown fields in {@code additionalProperties}
 * instead of failing, so every object of the loaded graph is also checked to have none — and then checks what
 * Thaw needs of them: the RuntimeClasses, the Knative flags each service depends on, contract mode's GPU,
 * readiness path and progress deadline, node mode's socket shared by the server and the proxies, the proxies holding
 * no GPU. Every container's arguments are parsed by the {@code thaw} CLI's own command line and every {@code THAW_}
 * variable it is given is one its command documents, so a manifest cannot name a flag or variable the code does not
 * have. Nothing here ran on a cluster (deploy/README.md).
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
      "networking.k8s.io/v1 NetworkPolicy", NetworkPolicy.class,
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
    assertEquals(List.of("ConfigMap", "RuntimeClass", "RuntimeClass", "Service", "Service", "Namespace",
        "NetworkPolicy", "DaemonSet"),
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
  void theRuntimeClassesScheduleOntoThawNodesTheServerThroughTheNvidiaRuntimeTheProxiesWithout() throws IOException {
    List<RuntimeClass> rcs = all(loadAll(), RuntimeClass.class);
    assertEquals(List.of("thaw", "thaw-proxy"), rcs.stream().map(r -> r.getMetadata().getName()).toList());
    assertEquals("nvidia", rcs.get(0).getHandler());
    assertEquals("runc", rcs.get(1).getHandler(), "a proxy holds no GPU");
    for (RuntimeClass rc : rcs) {
      assertEquals("true", rc.getScheduling().getNodeSelector().get("thaw.dev/node"));
      assertTrue(rc.getScheduling().getTolerations().stream().anyMatch(t -> "thaw.dev/node".equals(t.getKey())));
    }
    assertEquals(rcs.get(0).getScheduling(), rcs.get(1).getScheduling(), "proxies go where the node servers are");
  }

  /** Every container of every manifest (init containers too), by what holds it. */
  private static Map<String, Container> containers(List<KubernetesResource> rs) {
    Map<String, Container> all = new LinkedHashMap<>();
    for (KubernetesResource r : rs) {
      List<Container> cs = new ArrayList<>();
      if (r instanceof DaemonSet d) {
        PodSpec spec = d.getSpec().getTemplate().getSpec();
        cs.addAll(spec.getContainers());
        cs.addAll(spec.getInitContainers() == null ? List.of() : spec.getInitContainers());
      } else if (r instanceof Service s) {
        var spec = s.getSpec().getTemplate().getSpec();
        cs.addAll(spec.getContainers());
        cs.addAll(spec.getInitContainers() == null ? List.of() : spec.getInitContainers());
      }
      String owner = r.getClass().getSimpleName() + " " + ((HasMetadata) r).getMetadata().getName();
      cs.forEach(c -> all.put(owner + "/" + c.getName(), c));
    }
    return all;
  }

  @Test
  void everyContainersArgumentsParseAsTheCliAndEveryThawVariableIsOneItsCommandReads() throws IOException {
    CommandLine thaw = new CommandLine(new ThawCli());
    String rootHelp = thaw.getUsageMessage();
    Map<String, Container> cs = containers(loadAll());
    assertEquals(4, cs.size(), cs.keySet().toString());
    for (Map.Entry<String, Container> e : cs.entrySet()) {
      Container c = e.getValue();
      List<String> args = c.getArgs();
      CommandLine.ParseResult parsed;
      try {
        parsed = new CommandLine(new ThawCli()).parseArgs(args.toArray(String[]::new));
      } catch (CommandLine.ParameterException ex) {
        throw new AssertionError(e.getKey() + ": thaw " + String.join(" ", args) + ": " + ex.getMessage(), ex);
      }
      assertTrue(parsed.hasSubcommand(), e.getKey());
      String help = thaw.getSubcommands().get(args.get(0)).getUsageMessage() + rootHelp;
      for (EnvVar v : c.getEnv() == null ? List.<EnvVar>of() : c.getEnv()) {
        if (v.getName().startsWith("THAW_")) {
          assertTrue(help.contains(v.getName()), e.getKey() + ": thaw " + args.get(0) + " reads no " + v.getName());
        } else {
          assertTrue(v.getName().equals("JAVA_TOOL_OPTIONS") || v.getName().startsWith("NVIDIA_"),
              e.getKey() + ": " + v.getName() + " is read by nothing in the container");
        }
      }
    }
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
        assertTrue(all(rs, RuntimeClass.class).stream()
            .anyMatch(r -> r.getMetadata().getName().equals(spec.getRuntimeClassName())), name);
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
    assertTrue(thaw.getEnv().stream().anyMatch(e -> e.getName().equals("JAVA_TOOL_OPTIONS")),
        "JVM options through the JVM's own variable: the image's entrypoint is java, no launcher");
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
  void nodeModeSharesOneHostSocketBetweenTheServerAndGpuLessProxies() throws IOException {
    List<KubernetesResource> rs = loadAll();
    DaemonSet ds = all(rs, DaemonSet.class).get(0);
    PodSpec node = ds.getSpec().getTemplate().getSpec();
    assertEquals("thaw", node.getRuntimeClassName());
    Container server = node.getContainers().get(0);
    List<String> args = server.getArgs();
    String socket = args.get(args.indexOf("--socket") + 1);
    assertTrue(server.getEnv().stream()
        .anyMatch(e -> e.getName().equals("NVIDIA_VISIBLE_DEVICES") && e.getValue().equals("all")));
    assertFalse(args.contains("--function"), "functions are registered by their proxies");
    assertEquals(all(rs, Namespace.class).get(0).getMetadata().getName(), ds.getMetadata().getNamespace());
    Volume hostSocket = node.getVolumes().stream().filter(v -> v.getName().equals("socket")).findFirst().orElseThrow();
    assertEquals(Path.of(socket).getParent().toString(), mountOf(server, "socket"), "the socket is in the host folder");
    // The probes reach the server's TCP port, and only the monitoring namespace besides them.
    int port = Integer.parseInt(args.get(args.indexOf("--port") + 1));
    assertEquals("0.0.0.0", args.get(args.indexOf("--host") + 1));
    assertEquals(port, server.getLivenessProbe().getHttpGet().getPort().getIntVal());
    assertEquals(port, server.getReadinessProbe().getHttpGet().getPort().getIntVal());
    NetworkPolicy np = all(rs, NetworkPolicy.class).get(0);
    assertEquals(ds.getMetadata().getNamespace(), np.getMetadata().getNamespace());
    assertEquals(ds.getSpec().getTemplate().getMetadata().getLabels().get("app.kubernetes.io/name"),
        np.getSpec().getPodSelector().getMatchLabels().get("app.kubernetes.io/name"));
    assertEquals(port, np.getSpec().getIngress().get(0).getPorts().get(0).getPort().getIntVal());

    Service proxy = all(rs, Service.class).stream()
        .filter(x -> "thaw-proxy".equals(x.getSpec().getTemplate().getSpec().getRuntimeClassName())).findFirst()
        .orElseThrow();
    var spec = proxy.getSpec().getTemplate().getSpec();
    Container c = spec.getContainers().get(0);
    List<String> pargs = c.getArgs();
    assertEquals("proxy", pargs.get(0));
    assertEquals(socket, pargs.get(pargs.indexOf("--socket") + 1), "the proxy dials the server's socket");
    assertEquals(hostSocket.getHostPath().getPath(), spec.getVolumes().get(0).getHostPath().getPath());
    assertEquals(Path.of(socket).getParent().toString(), mountOf(c, spec.getVolumes().get(0).getName()));
    String function = pargs.get(pargs.indexOf("--function") + 1);
    assertTrue(function.substring(function.indexOf('=') + 1).contains("/"), "a registry reference: " + function);
    assertEquals(server.getImage(), c.getImage(), "the image the node server runs, already on the node");
    assertTrue(c.getResources().getLimits().keySet().stream().noneMatch(k -> k.contains("gpu")),
        "the node server owns the GPUs");
    EnvVar key = c.getEnv().stream().filter(e -> e.getName().equals("THAW_FUNCTION_KEY")).findFirst().orElseThrow();
    assertNotNull(key.getValueFrom().getSecretKeyRef(), "the tenant key comes from a Secret of the namespace");
    assertEquals("/v2/health/ready", c.getReadinessProbe().getHttpGet().getPath());
    assertEquals("/v2/health/live", c.getLivenessProbe().getHttpGet().getPath());
    assertEquals(8080, c.getPorts().get(0).getContainerPort(), "Knative's default $PORT");
  }

  private static String mountOf(Container c, String volume) {
    return c.getVolumeMounts().stream().filter(m -> m.getName().equals(volume)).findFirst().orElseThrow()
        .getMountPath();
  }
}
