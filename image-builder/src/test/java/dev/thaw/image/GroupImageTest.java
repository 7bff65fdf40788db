package dev.thaw.image;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import java.util.List;
import org.junit.jupiter.api.Test;

/** A group image's tags and the manifest its ranks carry (the group restored end to end: TensorParallelImageTest). */
class GroupImageTest {

  @Test
  void rankTagsKeepTheGroupsVersion() {
    assertEquals("qwen-32b-rank0", GroupImage.rankTag("qwen-32b", 0));
    assertEquals("qwen-32b-rank3:v1.2", GroupImage.rankTag("qwen-32b:v1.2", 3));
    assertThrows(IllegalArgumentException.class, () -> GroupImage.rankTag("Not A Tag", 0));
    String longest = "a".repeat(128);
    IllegalArgumentException tooLong = assertThrows(IllegalArgumentException.class,
        () -> GroupImage.rankTag(longest, 0));
    assertTrue(tooLong.getMessage().contains("at most 128"), tooLong.getMessage());
  }

  @Test
  void eachRanksConfigCarriesTheWholeGroupAndItsIndex() {
    JsonNode config = JsonNodeFactory.instance.objectNode().put("model", "tiny");
    GroupImage g = GroupImage.of("tiny-tp2:v1", "b-1", List.of(2, 3), config);
    assertEquals(List.of("tiny-tp2-rank0:v1", "tiny-tp2-rank1:v1"), g.rankTags());
    JsonNode rank1 = g.rankConfig(1);
    assertEquals(1, rank1.get(GroupImage.RANK_FIELD).asInt());
    JsonNode group = rank1.get(GroupImage.GROUP_FIELD);
    assertEquals("tiny-tp2:v1", group.get("tag").asText());
    assertEquals("b-1", group.get("build").asText());
    assertEquals("tiny-tp2-rank1:v1", group.get("ranks").get(1).asText());
    assertEquals(3, group.get("devices").get(1).asInt());
    assertEquals("tiny", group.get("config").get("model").asText());
    assertThrows(IllegalArgumentException.class, () -> GroupImage.of("one", "b", List.of(0), config),
        "a group has two or more ranks");
  }
}
