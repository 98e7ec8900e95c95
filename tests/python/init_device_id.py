"""init_process_group("zcc", device_id=cpu:0) on 2 spawned ranks (torch 2.x
eager init, which asks the group's backend for supports_splitting), then an
allreduce on the default group, on a new zcc group and on a new gloo group.
Prints "device_id ok" from rank 0 when every sum is right, or "device_id:
this torch refuses a CPU device" (torch 2.11 takes only accelerators); run
by test_dist.test_init_with_device_id."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import workers  # noqa: E402


def worker(rank, port):
    import zcc.torch  # noqa: F401  registers the backend
    torch.set_num_threads(1)
    try:
        dist.init_process_group("zcc", store=dist.TCPStore("127.0.0.1", port, None, False),
                                rank=rank, world_size=2, device_id=torch.device("cpu", 0))
    except ValueError as e:  # torch 2.11 takes only accelerators there
        if "accelerator" not in str(e):
            raise
        if rank == 0:
            print("device_id: this torch refuses a CPU device: %s" % e)
        return
    sums = []
    for group in (None, dist.new_group([0, 1], backend="zcc"),
                  dist.new_group([0, 1], backend="gloo")):
        t = torch.tensor([rank + 1.0])
        dist.all_reduce(t, group=group)
        sums.append(t.item())
    backend = dist.get_backend()
    dist.destroy_process_group()
    if sums != [3.0, 3.0, 3.0] or backend != "zcc":
        print("rank %d: sums %s, backend %s" % (rank, sums, backend))
        sys.exit(1)
    if rank == 0:
        print("device_id ok")


if __name__ == "__main__":
    server = workers.store_server()
    mp.spawn(worker, args=(server.port,), nprocs=2)
