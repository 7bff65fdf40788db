package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.TensorSpec;
import java.util.List;

/** A function's signature as the KServe v2 model metadata writes tensors. */
final class Signatures {

  private Signatures() {}

  static ObjectNode json(FunctionSignature s) {
    ObjectNode json = JsonNodeFactory.instance.objectNode();
    json.set("inputs", tensors(s.inputs()));
    json.set("outputs", tensors(s.outputs()));
    s.languageModel().ifPresent(lm -> json.putObject("languageModel").put("encoding", lm.encoding())
        .put("vocabSize", lm.vocabSize()).put("contextLength", lm.contextLength()));
    return json;
  }

  static ArrayNode tensors(List<TensorSpec> specs) {
    ArrayNode a = JsonNodeFactory.instance.arrayNode();
    for (TensorSpec t : specs) {
      ObjectNode o = a.addObject();
      o.put("name", t.name());
      o.put("datatype", t.datatype());
      ArrayNode shape = o.putArray("shape");
      t.shape().forEach(shape::add);
    }
    return a;
  }
}
