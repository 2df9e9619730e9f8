# Lays out the NuGet package and packs it with nuget (NuGet 2.8, as Debian ships it on Mono).
# Run as cmake -P with:
#   NUGET          the nuget program
#   NUSPEC         Lumen.nuspec.in          VERSION   the package's version
#   ASSEMBLY       Lumen.dll                DOCUMENTATION   its Lumen.xml
#   GLUE           liblumen_csharp.so built to find liblumen next to itself ($ORIGIN)
#   LIBRARY        liblumen's file          SONAME    the name the glue loads it by
#   OUTPUT         where Lumen.VERSION.nupkg is written
set(stage ${OUTPUT}/stage)
set(native ${stage}/runtimes/linux-x64/native)
file(REMOVE_RECURSE ${stage})
file(COPY ${ASSEMBLY} ${DOCUMENTATION} DESTINATION ${stage}/lib/net45)
file(COPY ${GLUE} DESTINATION ${native})
file(COPY_FILE ${LIBRARY} ${native}/${SONAME})
configure_file(${NUSPEC} ${stage}/Lumen.nuspec @ONLY)
file(REMOVE ${OUTPUT}/Lumen.${VERSION}.nupkg)
# nuget keeps its settings under HOME: give it one of its own, so that packing reads and
# writes nothing of the user's.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env HOME=${OUTPUT}/home
          ${NUGET} pack ${stage}/Lumen.nuspec -BasePath ${stage} -OutputDirectory ${OUTPUT}
          -NoPackageAnalysis -NonInteractive
  COMMAND_ERROR_IS_FATAL ANY)
