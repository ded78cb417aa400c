// The MPI tests' main: MPI_Init, GoogleTest on every rank (rank 0 prints the progress, the
// others only their failures), and one exit status for all ranks (the worst), so mpirun and
// CTest see a failure wherever it happened.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) GTEST_FLAG_SET(brief, true);
  int status = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
