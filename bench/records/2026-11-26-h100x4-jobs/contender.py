import sys, time, torch
d = torch.device(f"cuda:{sys.argv[1]}")
a = torch.randn(4096, 4096, device=d, dtype=torch.bfloat16)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    t = time.time()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize(d)
    time.sleep(max(0.0, 2.3 * (time.time() - t)))
