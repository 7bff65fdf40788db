# Sourced by bin/thaw, bin/thaw-bench and bin/thaw-cds (not run): what every launcher of this distribution starts
# Java with. Needs $home (the distribution's folder); sets:
#   java  the distribution's runtime/bin/java where it has one, else $JAVA_HOME/bin/java, else java on PATH
#   cp    lib/*.jar one by one, in byte order: the JVM would expand lib/* in directory order, which differs from one
#         file system to the next, and a class-data sharing archive is valid only with the class path it was made with
#   cds   -XX:SharedArchiveFile=lib/thaw.jsa where bin/thaw-cds made one for this very class path (lib/thaw.jsa.cp
#         holds it) and THAW_JAVA_OPTS chooses no archive of its own (-Xshare, SharedArchiveFile); else nothing
# A JVM given an archive that does not match (a jar changed since, another JVM build) ignores it silently and loads
# every class from the jars; the check of lib/thaw.jsa.cp keeps that from happening after a move or an upgrade, where
# the JDK's own archive would be lost with it.
if [[ -x "$home/runtime/bin/java" ]]; then
  java="$home/runtime/bin/java"
elif [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
  java="$JAVA_HOME/bin/java"
else
  java=java
fi

thaw_class_path() {
  local LC_ALL=C IFS=:
  local jars=("$home"/lib/*.jar)
  cp="${jars[*]}"
}
thaw_class_path

cds=()
if [[ -r "$home/lib/thaw.jsa" && -r "$home/lib/thaw.jsa.cp" && "${THAW_JAVA_OPTS:-}" != *-Xshare* \
      && "${THAW_JAVA_OPTS:-}" != *SharedArchiveFile* ]]; then
  IFS= read -r thaw_archived_cp < "$home/lib/thaw.jsa.cp" || true
  if [[ "${thaw_archived_cp:-}" == "$cp" ]]; then
    cds=("-XX:SharedArchiveFile=$home/lib/thaw.jsa")
  fi
fi
