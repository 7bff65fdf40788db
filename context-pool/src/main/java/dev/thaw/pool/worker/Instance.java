package dev.thaw.pool.worker;

import dev.thaw.image.restore.RestoredFunction;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ThawFunction;

/** The one function instance a worker holds once it became an image, however it was restored. */
interface Instance extends AutoCloseable {

  FunctionResponse invoke(FunctionRequest request) throws Exception;

  FunctionSession session();

  @Override
  void close();

  static Instance of(RestoredFunction<?> f) {
    return new Instance() {
      @Override
      public FunctionResponse invoke(FunctionRequest request) throws Exception {
        return f.invoke(request);
      }

      @Override
      public FunctionSession session() {
        return f.session();
      }

      @Override
      public void close() {
        f.close();
      }
    };
  }

  static <S> Instance of(ThawFunction<S> function, FunctionSession session, S state) {
    return new Instance() {
      @Override
      public FunctionResponse invoke(FunctionRequest request) throws Exception {
        return function.invoke(session, state, request);
      }

      @Override
      public FunctionSession session() {
        return session;
      }

      @Override
      public void close() {
        session.close();
      }
    };
  }
}
