package dev.thaw.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Pins the options' defaults, checks and JSON form. */
class ContextPoolOptionsTest {

  @Test
  void jsonRoundTripsEveryField() {
    ContextPoolOptions o = new ContextPoolOptions().setDevices(List.of(0, 1)).setIdleTarget(3).setMaxWorkers(5)
        .setMaxStarting(2).setDeviceChoice("sim").setJvmOptions(List.of("-Xmx1g"))
        .setEnvironment(Map.of("A", "b")).setStorePath(Path.of("/srv/store")).setWarmupLaunches(7)
        .setWarmupImage("mlp:1").setInvokeTimeout(Duration.ofMillis(1500)).setMaxFrameBytes(1 << 20)
        .setHelperLinks(1).setHelperSlotBytes(4L << 20).setHelperMinFreeBytes(0).setRecycleLimit(3)
        .setRecycleTimeout(Duration.ofSeconds(4));
    ContextPoolOptions back = ContextPoolOptions.fromJson(o.toJson());
    assertEquals(o.toJson(), back.toJson());
    assertEquals(Duration.ofMillis(1500), back.invokeTimeout());
    assertEquals(Path.of("/srv/store"), back.storePath());
    assertEquals(4L << 20, back.helperSlotBytes());
    assertEquals(3, back.recycleLimit());
    assertEquals(Duration.ofSeconds(4), back.recycleTimeout());
    assertEquals(o.toJson(), new ContextPoolOptions(o).toJson());
  }

  @Test
  void absentFieldsKeepTheirDefaultsAndBadValuesAreRefused() throws Exception {
    ObjectMapper json = new ObjectMapper();
    ContextPoolOptions o = ContextPoolOptions.fromJson(json.readTree("{\"idleTarget\": 4}"));
    assertEquals(4, o.idleTarget());
    assertEquals(ContextPoolOptions.DEFAULT_MAX_WORKERS, o.maxWorkers());
    assertEquals(ContextPoolOptions.DEFAULT_DEVICES, o.devices());
    assertEquals(ContextPoolOptions.DEFAULT_RECYCLE_LIMIT, o.recycleLimit());
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> ContextPoolOptions.fromJson(json.readTree("{\"idleTarget\": -1}"))).getMessage().contains("idle"));
    assertThrows(IllegalArgumentException.class, () -> ContextPoolOptions.fromJson(json.readTree("{\"nope\": 1}")));
    assertThrows(IllegalArgumentException.class, () -> new ContextPoolOptions().setDeviceChoice("tpu"));
    assertThrows(IllegalArgumentException.class, () -> new ContextPoolOptions().setDevices(List.of(0, 0)));
    assertThrows(IllegalArgumentException.class, () -> new ContextPoolOptions().setInvokeTimeout(Duration.ZERO));
    assertThrows(IllegalArgumentException.class, () -> new ContextPoolOptions().setHelperLinks(-1));
    assertThrows(IllegalArgumentException.class, () -> new ContextPoolOptions().setHelperSlotBytes(1000));
    assertThrows(IllegalArgumentException.class, () -> new ContextPoolOptions().setRecycleLimit(-1));
  }
}
